"""The writes a pass plans for a queued job's Kueue Workload: created once, deactivated while the job is
suspended, its quota handed back after an eviction, Finished with the job."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dtjob.api import ConditionType, DistributedTrainingJobSpec, JobStatus, timestamp
from dtjob.core import kueue
from dtjob.core.frameworks import Gang
from dtjob.core.observed import Observed
from dtjob.core.render import render_pod, render_spare


def workload_to_create(
    job: Mapping[str, Any],
    gang: Gang,
    queueing: kueue.Queueing | None,
    new: JobStatus,
    priority: kueue.Priority | None,
) -> dict[str, Any] | None:
    if queueing is None or queueing.state != kueue.State.MISSING or new.finished:
        return None
    pods = [render_pod(gang, member) for member in gang.members]
    # Spares hold the same resources as members: the quota counts them.
    pods += [
        render_spare(gang, role, number)
        for role in gang.spec.roles()
        for number in range(gang.spec.replica(role).spares)
    ]
    return kueue.render_workload(job, gang.job, queueing.queue, pods, priority)


def workload_active(
    queueing: kueue.Queueing | None, spec: DistributedTrainingJobSpec, old: JobStatus
) -> bool | None:
    """False when the job is suspended; True again on its resume only, so that a Workload Kueue itself
    deactivated (a rejected admission check, say) stays as Kueue left it."""
    if queueing is None or queueing.workload is None:
        return None
    if spec.run_policy.suspend:
        return False if queueing.active else None
    resuming = old.is_true(ConditionType.SUSPENDED)
    return True if resuming and not queueing.active else None


def workload_status(
    queueing: kueue.Queueing | None, observed: Observed, new: JobStatus, now: datetime
) -> dict[str, Any] | None:
    """An evicted gang's quota handed back once no pod of it is left; a finished job's Workload Finished."""
    if queueing is None or queueing.workload is None:
        return None
    patch: dict[str, Any] | None = None
    if new.finished and queueing.state != kueue.State.FINISHED:
        succeeded = new.is_true(ConditionType.SUCCEEDED)
        patch = kueue.finished(
            queueing.workload, succeeded, f"the job {'succeeded' if succeeded else 'failed'}", timestamp(now)
        )
    elif queueing.state == kueue.State.EVICTED and not observed.pods:
        patch = kueue.admission_cleared(queueing.workload, timestamp(now))
    if patch is None:
        return None
    version = queueing.workload["metadata"].get("resourceVersion")
    return {
        "metadata": {"name": queueing.workload["metadata"]["name"], "resourceVersion": version},
        "status": patch,
    }
