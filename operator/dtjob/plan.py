"""The one pure entry point of the operator: a job and its children in, a Plan of what to do out.

The Kopf adapter reads the job, the pods and Service it owns and the nodes those pods are bound to, calls
`reconcile`, and executes the Plan: deletes first, then server-side applies, then one status patch (only
if it changed), events, and the job's own deletion when its TTL expired.

A gang restart is two passes: the first only records attempt N+1 (and the counters) in the status; the
next finds the pods of attempt N stale and deletes them, then creates attempt N+1 once they are gone. The
status write is the commit point, so an operator stopped anywhere in between neither loses nor repeats a
restart.

Nothing here raises on a bad spec: an invalid job gets an Invalid condition and a Warning event, and its
children are left alone.
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
# Delete with no grace: the pod object goes at once, for one no kubelet will ever finish.
FORCE: Final = 0


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
    """Seconds until a time-based check is due (deadline, TTL, backoff, scheduling timeout, a grace on a
    pod running out); 0 when the next pass has work already (the teardown after a restart is recorded)."""


def reconcile(
    job: Mapping[str, Any],
    children: Sequence[Mapping[str, Any]],
    now: datetime,
    nodes: Sequence[Mapping[str, Any]] | None = None,
) -> Plan:
    """`nodes`: the Node objects the children are bound to, read after them (see `observe`); without
    them no node is judged lost and no pod stuck."""
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
    observed = observe(children, now, nodes)
    decision = decide(spec, old, gang, observed, now)
    new = next_status(old, gang, observed, decision, now, generation)
    deletes = _deletes(decision, gang.attempt, observed, old, spec)
    return Plan(
        apply=_applies(decision, gang, observed),
        delete=[delete for delete, _ in deletes],
        status=_changed(old, new),
        events=transition_events(old, new) + [event for _, event in deletes if event is not None],
        delete_job=decision.action == Action.TTL_EXPIRED,
        requeue_after=_requeue_after(decision, spec, observed, now),
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
    kept = [m for m in gang.members if m.pod in present and not present[m.pod].terminating]
    created = [m for m in gang.members if create and m.pod not in present]
    return [
        render_service(gang),
        *(_only_update(render_pod(gang, m), present[m.pod].uid) for m in kept),
        *(render_pod(gang, m) for m in created),
    ]


def _only_update(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    """The uid seen makes the apply an update only: a pod deleted since the pass listed it is refused
    (409) instead of recreated, which would slip a lone new rank into the old gang unnoticed."""
    pod["metadata"]["uid"] = uid
    return pod


def _deletes(
    decision: Decision, attempt: int, observed: Observed, old: JobStatus, spec: DistributedTrainingJobSpec
) -> list[tuple[Delete, Event | None]]:
    """Pods of other attempts always go; the action decides about the current attempt's (a restart
    leaves them to the next pass, when they are stale). A pod already terminating is deleted again only
    when stuck on a lost node past its grace period: then by force, and an Event says so."""
    doomed: list[PodView] = list(observed.not_of_attempt(attempt))
    current = observed.of_attempt(attempt)
    action = decision.action
    if action in (Action.SUSPEND, Action.DEADLINE_EXCEEDED):
        doomed += current
    elif action in (Action.COMPLETE, Action.FAIL) or decision.reason == Reason.FINISHED:
        doomed += [p for p in current if _cleaned_up(p, _cleanup_policy(old, spec))]
    deletes: list[tuple[Delete, Event | None]] = []
    for pod in doomed:
        if pod.stuck:
            message = f"pod {pod.name} was still terminating past its grace period on lost node {pod.node}"
            deletes.append(
                (Delete("Pod", pod.name, pod.uid or None, FORCE), Event("Warning", "ForceDeleted", message))
            )
        elif not pod.terminating:
            deletes.append((Delete("Pod", pod.name, pod.uid or None), None))
    return deletes


def _cleanup_policy(old: JobStatus, spec: DistributedTrainingJobSpec) -> CleanPodPolicy:
    failed = old.condition(ConditionType.FAILED)
    if failed is not None and failed.status == "True" and failed.reason == Reason.DEADLINE_EXCEEDED:
        return CleanPodPolicy.ALL  # a deadline removes every pod, whatever cleanPodPolicy says
    return spec.run_policy.clean_pod_policy


def _cleaned_up(pod: PodView, policy: CleanPodPolicy) -> bool:
    return policy == CleanPodPolicy.ALL or (policy == CleanPodPolicy.RUNNING and pod.state in ACTIVE_STATES)


def _requeue_after(
    decision: Decision, spec: DistributedTrainingJobSpec, observed: Observed, now: datetime
) -> float | None:
    if decision.action == Action.RESTART_GANG:
        return 0.0  # the next pass deletes the old attempt
    ttl = spec.run_policy.ttl_seconds_after_finished
    timers = [float(ttl) if decision.action in FINISHING and ttl is not None else decision.requeue_after]
    if (recheck := observed.recheck_at()) is not None:
        timers.append((recheck - now).total_seconds())
    return min((t for t in timers if t is not None), default=None)
