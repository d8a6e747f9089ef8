"""The one pure entry point of the operator: a job and its children in, a Plan of what to do out.

The Kopf adapter reads the job and the pods and Service it owns, calls `reconcile`, and executes the
Plan: deletes first, then server-side applies, then one status patch (only if it changed), events,
and the job's own deletion when its TTL expired. Nothing here raises on a bad spec: an invalid job gets
an Invalid condition and a Warning event, and its children are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from dtjob.api import CleanPodPolicy, ConditionType, DistributedTrainingJobSpec, JobStatus, parse_job
from dtjob.api.errors import describe
from dtjob.api.semantics import semantic_problems
from dtjob.desired import render_pod, render_service
from dtjob.frameworks import Gang
from dtjob.names import JobRef
from dtjob.observed import ACTIVE_STATES, Observed, PodView, observe
from dtjob.policy import Action, Decision, Reason, decide
from dtjob.status import FINISHING, Event, invalid_status, next_status, transition_events

__all__ = ["Delete", "Event", "Plan", "dump_status", "read_status", "reconcile"]

# Actions whose pass keeps the gang alive: the Service and the current attempt's pods are (re)applied,
# so edited children drift back.
KEEPS_GANG: Final = frozenset({Action.CREATE_MISSING, Action.WAIT})


@dataclass(frozen=True)
class Delete:
    kind: str
    name: str
    uid: str | None
    """A precondition: delete only the object we decided about, not a namesake created since."""
    grace_period_seconds: int | None = None
    """None: the pod's own grace period. 0: force, for a pod stuck terminating on a lost node."""


@dataclass(frozen=True)
class Plan:
    apply: list[dict[str, Any]] = field(default_factory=list)
    delete: list[Delete] = field(default_factory=list)
    status: dict[str, Any] | None = None
    """The whole new status, or None when it equals the job's current one."""
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    requeue_after: float | None = None
    """Seconds until a time-based check is due (deadline, TTL, backoff, scheduling timeout)."""


def reconcile(job: Mapping[str, Any], children: Sequence[Mapping[str, Any]], now: datetime) -> Plan:
    ref = JobRef.of(job)
    generation = job["metadata"].get("generation")
    old = read_status(job.get("status"))
    try:
        spec = parse_job(job).spec
    except ValidationError as error:
        return _invalid(old, describe(error), now, generation)
    if problems := semantic_problems(spec):
        return _invalid(old, "\n".join(problems), now, generation)

    gang = Gang.of(ref, spec, old.attempt)
    observed = observe(children)
    decision = decide(spec, old, gang, observed, now)
    new = next_status(old, gang, observed, decision, now, generation)
    return Plan(
        apply=_applies(decision, gang, observed),
        delete=_deletes(decision, gang.attempt, observed, old, spec),
        status=_changed(old, new),
        events=transition_events(old, new),
        delete_job=decision.action == Action.TTL_EXPIRED,
        requeue_after=_requeue_after(decision, spec),
    )


def read_status(raw: Mapping[str, Any] | None) -> JobStatus:
    """The stored status; one this operator cannot read is treated as none rather than wedging the job."""
    try:
        return JobStatus.model_validate(raw or {})
    except ValidationError:
        return JobStatus()


def dump_status(status: JobStatus) -> dict[str, Any]:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def _invalid(old: JobStatus, message: str, now: datetime, generation: int | None) -> Plan:
    new = invalid_status(old, message, now, generation)
    return Plan(status=_changed(old, new), events=transition_events(old, new))


def _changed(old: JobStatus, new: JobStatus) -> dict[str, Any] | None:
    new_dump = dump_status(new)
    return None if new_dump == dump_status(old) else new_dump


def _applies(decision: Decision, gang: Gang, observed: Observed) -> list[dict[str, Any]]:
    action = decision.action
    if action in (Action.SUSPEND, Action.RESTART_GANG):
        return [render_service(gang)]  # the Service stays: the gang comes back under the same names
    if action not in KEEPS_GANG or decision.reason == Reason.FINISHED:
        return []
    present = {p.name: p for p in observed.of_attempt(gang.attempt)}
    create = action == Action.CREATE_MISSING
    wanted = [
        m for m in gang.members
        if (m.pod in present and not present[m.pod].terminating) or (create and m.pod not in present)
    ]  # fmt: skip
    return [render_service(gang), *(render_pod(gang, m) for m in wanted)]


def _deletes(
    decision: Decision, attempt: int, observed: Observed, old: JobStatus, spec: DistributedTrainingJobSpec
) -> list[Delete]:
    """Pods of other attempts always go; the action decides about the current attempt's."""
    doomed: list[PodView] = list(observed.not_of_attempt(attempt))
    current = observed.of_attempt(attempt)
    action = decision.action
    if action in (Action.SUSPEND, Action.RESTART_GANG, Action.DEADLINE_EXCEEDED):
        doomed += current
    elif action in (Action.COMPLETE, Action.FAIL) or decision.reason == Reason.FINISHED:
        doomed += [p for p in current if _cleaned_up(p, _cleanup_policy(old, spec))]
    # A pod already terminating is not deleted again. (Force-deleting one stuck on a lost node needs the
    # node list, which reconcile does not get yet: grace_period_seconds stays the pod's own.)
    return [Delete(kind="Pod", name=p.name, uid=p.uid or None) for p in doomed if not p.terminating]


def _cleanup_policy(old: JobStatus, spec: DistributedTrainingJobSpec) -> CleanPodPolicy:
    failed = old.condition(ConditionType.FAILED)
    if failed is not None and failed.status == "True" and failed.reason == Reason.DEADLINE_EXCEEDED:
        return CleanPodPolicy.ALL  # a deadline removes every pod, whatever cleanPodPolicy says
    return spec.run_policy.clean_pod_policy


def _cleaned_up(pod: PodView, policy: CleanPodPolicy) -> bool:
    return policy == CleanPodPolicy.ALL or (policy == CleanPodPolicy.RUNNING and pod.state in ACTIVE_STATES)


def _requeue_after(decision: Decision, spec: DistributedTrainingJobSpec) -> float | None:
    ttl = spec.run_policy.ttl_seconds_after_finished
    if decision.action in FINISHING and ttl is not None:
        return float(ttl)
    return decision.requeue_after
