"""Whole passes in unit tests: a job with a Master and two Workers (JOB, its pods' NAMES), and what a
Plan does to the job (`after`) and its children (`applied`, `deleted`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dtjob.api import NcclProfileName
from dtjob.core import kueue_priority
from dtjob.core.gke import Installer
from dtjob.core.plan import Plan
from dtjob.core.progress import Ledger
from dtjob.core.reconcile import reconcile
from dtjob.core.status.codec import status_patch
from dtjob.core.world import GkeFacts, KueueFacts, Needs, PassSettings, World
from tests.support.builders import SHARED_CHECKPOINTS, manifest, merged

JOB = manifest(("Master", 1), ("Worker", 2), checkpoint=SHARED_CHECKPOINTS)
NAMES = ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"]


# What the runtime reads for a queued job that names no priority class on a cluster without a
# globalDefault PriorityClass: the Workload carries none (priority 0).
NO_DEFAULT_PRIORITY = kueue_priority.Priority(kueue_priority.POD_PRIORITY_SOURCE, "", 0, global_default=True)


def world_of(
    job: Mapping[str, Any],
    children: Sequence[Mapping[str, Any]],
    now: datetime,
    nodes: Sequence[Mapping[str, Any]] | None = None,
    *,
    networks: frozenset[str] | None = None,
    device_classes: frozenset[str] | None = None,
    installers: Mapping[str, Installer] | None = None,
    autopilot: bool = False,
    dranet_accelerators: frozenset[str] | None = None,
    daemon_images: Mapping[NcclProfileName, str] | None = None,
    workload: Mapping[str, Any] | None = None,
    flavors: Mapping[str, Mapping[str, Any]] | None = None,
    kueue_served: bool = True,
    priority: kueue_priority.Priority | None = NO_DEFAULT_PRIORITY,
    routes: Mapping[str, str] | None = None,
    ledger: Ledger | None = None,
    progress_url: str | None = None,
    listed: bool = True,
    overdue: Sequence[Mapping[str, Any]] = (),
    from_caches: bool = False,
) -> World:
    """A World from what a unit test names. `listed`: the children a test hands in are the truth, as a
    fresh listing is (False: as the runtime's caches, which a decision that takes members for lost asks
    to confirm). `from_caches`: the children and nodes are the caches as they stand, which may lag (the
    core asks for the nodes they lack and whether the `overdue` pods exist)."""
    return World(
        job, children, now, nodes,
        gke=GkeFacts(networks, device_classes, installers, autopilot, dranet_accelerators),
        kueue=KueueFacts(workload, flavors or {}, kueue_served, routes, priority),
        ledger=ledger,
        settings=PassSettings(daemon_images, progress_url),
        listed=listed,
        overdue=overdue,
        from_caches=from_caches,
    )  # fmt: skip


def plan_for(*args: Any, **kwargs: Any) -> Plan:
    """The core's plan for the world `world_of` makes of the arguments; it fails a test whose world lacks
    what the core needs to decide (see `needs_for`)."""
    outcome = reconcile(world_of(*args, **kwargs))
    assert isinstance(outcome, Plan), f"the core needs {outcome} before it decides"
    return outcome


def needs_for(*args: Any, **kwargs: Any) -> Needs:
    """What the core asks to read first, in the world `world_of` makes of the arguments."""
    outcome = reconcile(world_of(*args, **kwargs))
    assert isinstance(outcome, Needs), f"the core decided without reading anything: {outcome}"
    return outcome


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


def invalid_for_now(plan: Plan) -> str:
    """The message of a pass that holds the job Invalid until the cluster has what it lacks: no pods, and
    looked at again in 30 s (core/network.py's RECHECK_SECONDS)."""
    assert plan.status is not None and plan.status["phase"] == "Invalid" and not plan.create, plan.status
    assert plan.requeue_after == 30.0
    return str(next(c for c in plan.status["conditions"] if c["type"] == "Invalid")["message"])
