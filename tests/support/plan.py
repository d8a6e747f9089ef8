"""Whole passes in unit tests: a job with a Master and two Workers (JOB, its pods' NAMES), and what a
Plan does to the job (`after`) and its children (`applied`, `deleted`)."""

from __future__ import annotations

from typing import Any

from dtjob.core.plan import Plan, status_patch
from tests.support.builders import SHARED_CHECKPOINTS, manifest, merged

JOB = manifest(("Master", 1), ("Worker", 2), checkpoint=SHARED_CHECKPOINTS)
NAMES = ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"]


def after(job: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """The job as stored once the plan's status patch landed: the merge patch the operator sends, applied
    as the apiserver applies it."""
    if plan.status is None:
        return job
    return {**job, "status": merged(job.get("status") or {}, status_patch(job.get("status"), plan.status))}


def applied(plan: Plan) -> list[str]:
    """What the plan writes: the Service it applies and the pods it creates."""
    return [f"{o['kind']}/{o['metadata']['name']}" for o in [*plan.apply, *plan.create]]


def deleted(plan: Plan) -> list[str]:
    return [d.name for d in plan.delete]


def condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in job["status"]["conditions"] if c["type"] == type_), None)
