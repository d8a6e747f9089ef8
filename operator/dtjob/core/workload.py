"""The writes a pass plans for a queued job's Kueue Workload: created once, kept matching the job while it
holds no quota (its podSets, its queue), deactivated while the job is suspended, PodsReady once its gang
runs, its quota handed back after an eviction, Finished with the job, deleted once the job leaves Kueue."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from dtjob.api import Condition, ConditionType, DistributedTrainingJobSpec, JobStatus, timestamp
from dtjob.core import kueue, kueue_priority
from dtjob.core.decide.members import kept_in_place
from dtjob.core.frameworks import Gang
from dtjob.core.observed import Observed, PodView
from dtjob.core.plan import Delete
from dtjob.core.render import render_pod, render_spare
from dtjob.core.views import PodState
from dtjob.core.workload_match import follows_job, holds_quota, priority_patch

# The Workload condition Kueue's waitForPodsReady reads (an admitted Workload without it True is evicted
# at the timeout), with jobframework's reasons and messages (reconciler.go: generatePodsReadyCondition).
PODS_READY = "PodsReady"
STARTED = "Started"
RECOVERED = "Recovered"
WAIT_FOR_START = "WaitForStart"
WAIT_FOR_RECOVERY = "WaitForRecovery"
READY_MESSAGE = "All pods reached readiness and the workload is running"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"
RECOVERY_MESSAGE = "At least one pod has failed, waiting for recovery"
# jobframework's reason for a Workload whose job cannot start (reconciler.go: FailedToStartFinishedReason).
FAILED_TO_START = "FailedToStart"


def workload_to_create(
    job: Mapping[str, Any],
    gang: Gang,
    queueing: kueue.Queueing | None,
    new: JobStatus,
    priority: kueue_priority.Priority | None,
) -> dict[str, Any] | None:
    if queueing is None or queueing.state != kueue.State.MISSING or new.finished:
        return None
    return _rendered(job, gang, queueing.queue, priority)


def _rendered(
    job: Mapping[str, Any], gang: Gang, queue: str, priority: kueue_priority.Priority | None
) -> dict[str, Any]:
    pods = [render_pod(gang, member) for member in gang.members]
    # Spares hold the same resources as members: the quota counts them.
    pods += [
        render_spare(gang, role, number)
        for role in gang.spec.roles()
        for number in range(gang.spec.replica(role).spares)
    ]
    return kueue.render_workload(job, gang.job, queue, pods, priority)


def workload_spec(
    job: Mapping[str, Any],
    gang: Gang,
    queueing: kueue.Queueing | None,
    spec: DistributedTrainingJobSpec,
    old: JobStatus,
    priority: kueue_priority.Priority | None = None,
) -> dict[str, Any] | None:
    """A merge patch of the Workload (its name in metadata) that keeps it the job's, as Kueue's job
    integrations keep theirs: spec.active false while the job is suspended (or invalid: `deactivated`),
    true again on its resume or once it is valid again only (a Workload Kueue itself deactivated, a
    rejected admission check say, stays as Kueue left it); and,
    while it holds no quota, its queue and podSets those of the job's pods now (a template changed while
    suspended, a queue label changed while queued: Kueue's updateWorkloadToMatchJob) and the priority
    class the job names now (`priority`, read by the pass), onto the version read. Named as found: a
    Workload made by an earlier release keeps the name it was given."""
    if queueing is None or queueing.workload is None or queueing.state == kueue.State.FINISHED:
        return None
    workload = queueing.workload
    patch: dict[str, Any] = {"metadata": {"name": workload["metadata"]["name"]}, "spec": {}}
    if spec.run_policy.suspend and queueing.active:
        patch["spec"]["active"] = False
    elif (
        not spec.run_policy.suspend
        and (old.is_true(ConditionType.SUSPENDED) or old.is_true(ConditionType.INVALID))
        and not queueing.active
    ):
        patch["spec"]["active"] = True
    if not holds_quota(workload) and not follows_job(
        workload, rendered := _rendered(job, gang, queueing.queue, None)
    ):
        patch["metadata"].update(
            resourceVersion=workload["metadata"].get("resourceVersion"),
            annotations=rendered["metadata"]["annotations"],
        )
        patch["spec"].update(queueName=queueing.queue, podSets=rendered["spec"]["podSets"])
    if not holds_quota(workload) and (moved := priority_patch(workload, priority)):
        patch["metadata"]["resourceVersion"] = workload["metadata"].get("resourceVersion")
        patch["spec"].update(moved)
    return patch if patch["spec"] else None


def deactivated(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The merge patch that deactivates the Workload of a job that is invalid (it makes no pods) while the
    Workload holds no quota, so that Kueue does not admit it for nothing; None when there is nothing to
    deactivate. A Workload holding quota is left to the job's gang: an invalid spec does not stop it."""
    if workload is None or (workload.get("spec") or {}).get("active") is False or holds_quota(workload):
        return None
    conditions = (workload.get("status") or {}).get("conditions") or []
    if any(c.get("type") == "Finished" and c.get("status") == "True" for c in conditions):
        return None
    return {"metadata": {"name": workload["metadata"]["name"]}, "spec": {"active": False}}


def workload_to_delete(workload: Mapping[str, Any] | None, queueing: kueue.Queueing | None) -> list[Delete]:
    """The Workload of a job that left Kueue (its queue label removed while it held no quota): deleted, as
    Kueue deletes a Workload that no longer matches its job, so that it is never admitted for a job that
    runs without it."""
    if workload is None or queueing is not None or holds_quota(workload):
        return []
    return [Delete("Workload", workload["metadata"]["name"], workload["metadata"].get("uid"))]


def workload_status(
    queueing: kueue.Queueing | None,
    gang: Gang,
    observed: Observed,
    new: JobStatus,
    now: datetime,
    needed: int,
) -> dict[str, Any] | None:
    """An evicted gang's quota handed back once no pod of it is left (its spares, counted in the Workload,
    included); a finished job's Workload Finished once no pod of it holds resources (its quota is the
    pods': those a cleanPodPolicy deletes keep it for their grace period, those it keeps running keep it
    while they run); an admitted one's PodsReady as Kueue's job integrations keep it, `needed` members
    Ready or Succeeded (see gang_readiness)."""
    if queueing is None or queueing.workload is None:
        return None
    patch: dict[str, Any] | None = None
    if new.finished:
        if queueing.state != kueue.State.FINISHED and not holding_resources(observed):
            succeeded = new.is_true(ConditionType.SUCCEEDED)
            message = f"the job {'succeeded' if succeeded else 'failed'}"
            patch = finished(queueing.workload, succeeded, message, timestamp(now))
    elif queueing.state == kueue.State.EVICTED and not observed.pods and not observed.spares:
        patch = admission_cleared(queueing.workload, timestamp(now))
    elif queueing.state == kueue.State.ADMITTED:
        # From the new status, not the old one the pass's relabelling reads: in the pass that decides an
        # in-place restart only the new one says so, and its kept pods already count for the new attempt.
        kept = kept_in_place(new, observed)
        readiness = gang_readiness(gang, observed, needed, kept, was_ready(queueing.workload))
        patch = pods_ready(queueing.workload, readiness, timestamp(now))
    return None if patch is None else _guarded(queueing.workload, patch)


def holding_resources(observed: Observed) -> tuple[PodView, ...]:
    """The job's pods that still hold what they were scheduled with: not yet in a terminal phase (being
    deleted counts until the pod is gone), spares included, as Kueue's pod integration counts them."""
    return tuple(p for p in (*observed.pods, *observed.spares) if not p.exited)


def _guarded(workload: Mapping[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A status patch of the Workload as it was read (its resourceVersion: a write in between fails it)."""
    version = workload["metadata"].get("resourceVersion")
    return {"metadata": {"name": workload["metadata"]["name"], "resourceVersion": version}, "status": patch}


def failed_to_start(
    queueing: kueue.Queueing | None, invalid: Condition | None, now: datetime
) -> dict[str, Any] | None:
    """A queued job whose pods the apiserver refuses cannot start: its Workload Finished with Kueue's
    reason for it (jobframework's FailedToStart), so that its quota is not held by a job with no pod."""
    if queueing is None or queueing.workload is None or queueing.state == kueue.State.FINISHED:
        return None
    message = invalid.message if invalid is not None else "the job cannot start"
    patch = finished(queueing.workload, False, message, timestamp(now), reason=FAILED_TO_START)
    return _guarded(queueing.workload, patch)


def gang_needs(spec: DistributedTrainingJobSpec, gang: Gang) -> int:
    """The members Kueue's waitForPodsReady waits for: the gang's, or an elastic gang's minimum (it trains
    with that many; the rest may wait for capacity)."""
    elastic = spec.torch.elastic
    return elastic.min_replicas if elastic is not None else len(gang.members)


class Readiness(StrEnum):
    """A gang's readiness as Kueue's waitForPodsReady counts it (see `gang_readiness`)."""

    READY = "Ready"
    NOT_READY = "NotReady"
    ENDING = "Ending"
    """Short of its count because it is finishing: a trainer exited 0, and its peers leave Ready on their
    way out (Ready turns False before the phase turns Succeeded). No recovery to wait for."""


def gang_readiness(
    gang: Gang, observed: Observed, needed: int, kept: Sequence[PodView], started: bool
) -> Readiness:
    """As Kueue's job integrations count pods for waitForPodsReady (a batch Job's `ready + succeeded >=
    parallelism`): the attempt's members Ready or Succeeded (or whose trainer exited 0), and the pods an
    in-place restart keeps (`kept`: relabelled with the attempt a pass later), against `needed` (the gang's
    size; an elastic gang's minimum). Spares are not awaited for the start; once the gang was ready
    (`started`), a Ready spare counts: it takes a lost member's rank at once."""
    attempt = [p for p in observed.of_attempt(gang.attempt) if not p.terminating]
    done = [p for p in attempt if p.state == PodState.SUCCEEDED or (p.exited and p.exit_code == 0)]
    ready = [p for p in (*attempt, *kept) if p.state == PodState.READY and p not in done]
    spares = (
        [p for p in observed.spares if p.state == PodState.READY and not p.terminating] if started else []
    )
    if len(done) + len(ready) + len(spares) >= needed:
        return Readiness.READY
    return Readiness.ENDING if done else Readiness.NOT_READY


def was_ready(workload: Mapping[str, Any]) -> bool:
    """Whether the Workload's gang was ready since its admission: PodsReady True, or waiting for recovery."""
    current = _pods_ready_condition(workload)
    return current.get("status") == "True" or current.get("reason") == WAIT_FOR_RECOVERY


def _pods_ready_condition(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == PODS_READY), {})


def pods_ready(workload: Mapping[str, Any], readiness: Readiness, now: str) -> dict[str, Any] | None:
    """The Workload's PodsReady condition where it changes, as jobframework's generatePodsReadyCondition
    writes it: True once the gang is ready (Recovered after a recovery); False, WaitForRecovery, once a
    ready gang lost a pod (Kueue's recoveryTimeout counts from then); unchanged while it ends. Not written
    before the first readiness: Kueue times an admitted Workload without it from its admission, as with
    WaitForStart."""
    current = _pods_ready_condition(workload)
    recovering = current.get("reason") in (WAIT_FOR_RECOVERY, RECOVERED)
    if readiness == Readiness.READY:
        wanted = ("True", RECOVERED if recovering else STARTED, READY_MESSAGE)
    elif readiness == Readiness.NOT_READY and was_ready(workload):
        wanted = ("False", WAIT_FOR_RECOVERY, RECOVERY_MESSAGE)
    else:
        return None
    if (current.get("status"), current.get("reason")) == wanted[:2]:
        return None
    conditions = (workload.get("status") or {}).get("conditions") or []
    kept = [c for c in conditions if c.get("type") != PODS_READY]
    return {"conditions": [*kept, condition(PODS_READY, *wanted, now)]}


def admission_cleared(workload: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The Workload status that hands an evicted Workload's quota back once its gang is gone, as
    jobframework does: no admission, QuotaReserved False (Pending), Requeued True after a preemption."""
    status = workload.get("status") or {}
    conditions = status.get("conditions") or []
    evicted: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Evicted"), {})
    reason, message = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "")
    # PodsReady too: a gang admitted again starts its PodsReady timeout anew (jobframework writes
    # WaitForStart for a Workload that is not admitted).
    kept = [
        c for c in conditions if c.get("type") not in ("QuotaReserved", "Admitted", "Requeued", PODS_READY)
    ]
    return {
        "admission": None,
        "conditions": [
            *kept,
            condition("QuotaReserved", "False", "Pending", message, now),
            condition("Admitted", "False", "NoReservation", "The workload has no reservation", now),
            condition("Requeued", "True" if reason == "Preempted" else "False", reason, message, now),
            *(
                [condition(PODS_READY, "False", WAIT_FOR_START, NOT_READY_MESSAGE, now)]
                if _has(conditions, PODS_READY)
                else []
            ),
        ],
    }


def _has(conditions: Sequence[Mapping[str, Any]], type_: str) -> bool:
    return any(c.get("type") == type_ for c in conditions)


def finished(
    workload: Mapping[str, Any], succeeded: bool, message: str, now: str, reason: str | None = None
) -> dict[str, Any]:
    """The Workload status patch that marks it Finished (Kueue then releases its quota)."""
    conditions = [
        c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") != "Finished"
    ]
    reason = reason or ("Succeeded" if succeeded else "Failed")
    conditions.append(condition("Finished", "True", reason, message, now))
    return {"conditions": conditions}


def condition(type_: str, status: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": now,
    }
