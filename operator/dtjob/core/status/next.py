"""The status after carrying out a pass's decision: counters, times, per-role counts and conditions, each
contributed in its turn to a draft (the order the conditions are set in is the order a new one is listed)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dtjob.api import ConditionType, JobStatus, LastRestart, Progress, Restarts, timestamp
from dtjob.api.semantics import checkpoint_warnings
from dtjob.core.decide import Action, Decision, Facts, Reason, restart_charge
from dtjob.core.frameworks import Gang
from dtjob.core.kueue import State
from dtjob.core.observed import Observed, PodState, PodView
from dtjob.core.status.conditions import FINISHING, Conditions, phase_of
from dtjob.core.status.members import (
    all_running,
    elastic_of,
    preflight_of,
    replica_status,
    set_schedulability,
    set_slow_rank,
)


@dataclass
class _Draft:
    """The status being put together in one pass: what the contributors change."""

    conditions: Conditions
    attempt: int
    restarts: Restarts
    last_restart: LastRestart | None
    avoided_nodes: list[str]
    start_time: str | None
    completion_time: str | None
    created_attempt: int | None = None


def next_status(facts: Facts, decision: Decision, progress: Progress | None = None) -> JobStatus:
    """The status after carrying out `decision`: counters, times, per-role counts and conditions.
    `progress`: the training progress to show (see progress.carried)."""
    old, gang, observed, now = facts.status, facts.gang, facts.observed, facts.now
    draft = _Draft(Conditions(old.conditions, now, facts.generation), old.attempt, old.restarts,
                   old.last_restart, old.avoided_nodes, old.start_time, old.completion_time)  # fmt: skip
    _spec_conditions(draft.conditions, gang)
    # A job waiting for Kueue is held as a suspended one is (no pods), under a condition of its own.
    holding = ConditionType.QUEUED if decision.reason == Reason.QUEUED else ConditionType.SUSPENDED
    resumed = old.is_true(ConditionType.SUSPENDED) and not (
        decision.action == Action.SUSPEND and holding == ConditionType.SUSPENDED
    )
    _end_suspended_attempt(draft, old, decision, observed, holding)
    _restart(draft, decision, now)
    _settling(draft, decision)
    current = observed.of_attempt(draft.attempt)
    draft.created_attempt = _created(draft, old, decision, gang, current, now)
    _hold_or_resume(draft, decision, holding, resumed, now)
    _admission(draft, facts, decision)
    _finish(draft, decision, now)
    _gang_conditions(draft, facts, decision)
    if decision.replaced:
        draft.restarts = draft.restarts.model_copy(
            update={"replacements": draft.restarts.replacements + len(decision.replaced)}
        )
    broken_since = (old.broken_since or timestamp(now)) if decision.reason == Reason.SETTLING else None
    return _status(draft, facts, decision, current, progress, broken_since)


def _spec_conditions(conditions: Conditions, gang: Gang) -> None:
    """What the spec itself says: valid (an invalid one never gets here), checkpoints shared or not."""
    conditions.set(ConditionType.INVALID, "False", "ValidSpec", "the spec is valid")
    if warnings := checkpoint_warnings(gang.spec):
        conditions.set(
            ConditionType.CHECKPOINT_NOT_SHARED, "True", "CheckpointNotShared", "\n".join(warnings)
        )
    else:
        conditions.set(
            ConditionType.CHECKPOINT_NOT_SHARED, "False", "CheckpointShared", "checkpoints are shared"
        )


def _end_suspended_attempt(
    draft: _Draft, old: JobStatus, decision: Decision, observed: Observed, holding: ConditionType
) -> None:
    """Suspending ends the attempt: its pods, deleted now, are stale ones to wait for on resume, not lost
    members of the resumed gang, which starts afresh (from the checkpoint) as the next attempt. Its pods
    count as its start too: a leader taken away after creating them never recorded it."""
    started = old.created_attempt == draft.attempt or bool(observed.of_attempt(draft.attempt))
    if decision.action == Action.SUSPEND and not old.is_true(holding) and started:
        draft.attempt += 1


def _restart(draft: _Draft, decision: Decision, now: datetime) -> None:
    """A gang restart: the next attempt, the counter its cause is charged to, status.lastRestart; and the
    failed preflight's own counter."""
    if decision.action == Action.FAIL and decision.reason == Reason.PREFLIGHT_FAILED:
        # Its own counter: the fabric failed, not the code, so backoffLimit and total are left alone. Counted
        # once: a failed job is finished, and no later pass decides FAIL again.
        draft.restarts = draft.restarts.model_copy(
            update={"preflight_failures": draft.restarts.preflight_failures + 1}
        )
    if decision.action != Action.RESTART_GANG:
        return
    draft.attempt += 1
    charge = restart_charge(decision.reason).value
    restarts = draft.restarts
    draft.restarts = restarts.model_copy(
        update={charge: getattr(restarts, charge) + 1, "total": restarts.total + 1}
    )
    if decision.avoid is not None and decision.avoid not in draft.avoided_nodes:
        draft.avoided_nodes = [*draft.avoided_nodes, decision.avoid]
    draft.last_restart = LastRestart(reason=decision.reason, message=decision.message, time=timestamp(now),
                                     step=decision.step, failures=list(decision.failures),
                                     in_place=decision.in_place or None)  # fmt: skip
    message = f"attempt {draft.attempt}: {decision.message}"
    draft.conditions.set(ConditionType.RESTARTING, "True", decision.reason, message)
    draft.conditions.set(ConditionType.RUNNING, "False", "Restarting", decision.message)


def _settling(draft: _Draft, decision: Decision) -> None:
    if decision.reason == Reason.SETTLING:
        draft.conditions.set(ConditionType.RESTARTING, "True", decision.reason, decision.message)
        draft.conditions.set(ConditionType.RUNNING, "False", "MemberEnded", decision.message)


def _created(
    draft: _Draft, old: JobStatus, decision: Decision, gang: Gang, current: tuple[PodView, ...], now: datetime
) -> int | None:
    """The attempt whose pods were all created (status.createdAttempt), with the Created condition and the
    start time once they are. From here on a missing pod of this attempt is a lost member, not one still to
    create. All present counts too: an operator that stopped (or whose status write was refused as
    outdated) between creating the pods and recording it records it now, start time and all."""
    action, attempt = decision.action, draft.attempt
    present = {p.member for p in current}
    all_present = action in (Action.CREATE_MISSING, Action.WAIT) and all(
        m.pod in present for m in gang.members
    )
    if action == Action.CREATE_MISSING or (all_present and old.created_attempt != attempt):
        kept = f"; {', '.join(decision.kept)} train on in place" if decision.kept else ""
        kept += "".join(f"; spare {spare} takes the rank of {member}" for spare, member in decision.takeovers)
        message = f"created the pods of attempt {attempt}{kept}"
        draft.conditions.set(ConditionType.CREATED, "True", "Created", message)
        if draft.start_time is None:
            draft.start_time = timestamp(now)
    return attempt if action == Action.CREATE_MISSING or all_present else old.created_attempt


def _hold_or_resume(
    draft: _Draft, decision: Decision, holding: ConditionType, resumed: bool, now: datetime
) -> None:
    if resumed:
        draft.start_time = timestamp(now)  # activeDeadlineSeconds counts from the resume, as for a Job
        draft.conditions.set(ConditionType.SUSPENDED, "False", "Resumed", "the job was resumed")
    if decision.action == Action.SUSPEND:
        draft.conditions.set(holding, "True", decision.reason, decision.message)
        draft.conditions.set(ConditionType.RUNNING, "False", holding.value, decision.message)


NOT_QUEUED = "NotQueued"


def _admission(draft: _Draft, facts: Facts, decision: Decision) -> None:
    """Kueue's word: `queued` the job is in a Kueue queue; `admitted` what its admission says, once given."""
    conditions, old, queueing = draft.conditions, facts.status, facts.queueing
    queued = queueing is not None
    admitted = queueing.message if queueing is not None and queueing.state == State.ADMITTED else None
    if old.finished or decision.action in FINISHING:
        pass  # a finished job's Workload is Finished too: the Admitted condition says how it ran
    elif queued and admitted is None:
        conditions.set(ConditionType.ADMITTED, "False", "NotAdmitted", decision.message)
        if decision.action == Action.SUSPEND:
            # Back in the queue with no pod: activeDeadlineSeconds counts again from the next start, as
            # for a Job that Kueue suspends (the Job controller clears its startTime).
            draft.start_time = None
    elif admitted is not None:
        conditions.set(ConditionType.QUEUED, "False", "Admitted", admitted)
        conditions.set(ConditionType.ADMITTED, "True", "Admitted", admitted)
    elif not queued and old.condition(ConditionType.QUEUED) is not None:
        # Its queue label removed while its Workload held no quota (workload_match.queue_in_force).
        message = "the job names no LocalQueue any more: it runs without Kueue"
        conditions.set(ConditionType.QUEUED, "False", NOT_QUEUED, message)
        conditions.set(ConditionType.ADMITTED, "False", NOT_QUEUED, message)


def _finish(draft: _Draft, decision: Decision, now: datetime) -> None:
    if (finished := FINISHING.get(decision.action)) is None:
        return
    draft.completion_time = draft.completion_time or timestamp(now)
    draft.conditions.set(finished, "True", decision.reason, decision.message)
    draft.conditions.set(ConditionType.RUNNING, "False", finished, decision.message)
    draft.conditions.set(ConditionType.RESTARTING, "False", finished, decision.message)


def _gang_conditions(draft: _Draft, facts: Facts, decision: Decision) -> None:
    """Running while every member runs; Unschedulable while one waits for a node; SlowRank."""
    conditions, attempt, old, gang, observed = (
        draft.conditions,
        draft.attempt,
        facts.status,
        facts.gang,
        facts.observed,
    )
    action, current = decision.action, observed.of_attempt(attempt)
    if (
        action in (Action.CREATE_MISSING, Action.WAIT)
        and not old.finished
        and all_running(gang, observed, attempt)
    ):
        running = f"{len(gang.members)}/{len(gang.members)} pods of attempt {attempt} are running"
        conditions.set(ConditionType.RUNNING, "True", "AllReplicasRunning", running)
        conditions.set(ConditionType.RESTARTING, "False", "AllReplicasRunning", running)
    if (
        action in (Action.CREATE_MISSING, Action.WAIT, Action.REPLACE_MEMBERS, Action.SUSPEND)
        and not old.finished
    ):
        # A suspended job's pods are going: none of them waits for a node any more.
        set_schedulability(conditions, () if action == Action.SUSPEND else current, gang.spec)
    if not old.finished and action not in FINISHING:
        # A restart's new attempt is not judged yet: the slow ranks were the ended attempt's.
        set_slow_rank(conditions, facts.slow if attempt == gang.attempt else None, current, attempt)


def _status(
    draft: _Draft,
    facts: Facts,
    decision: Decision,
    current: tuple[PodView, ...],
    progress: Progress | None,
    broken_since: str | None,
) -> JobStatus:
    old, gang, observed = facts.status, facts.gang, facts.observed
    attempt = draft.attempt
    ready = sum(1 for p in current if p.state == PodState.READY and not p.terminating)
    replicas = [
        replica_status(
            role, [p for p in current if p.role == role], [p for p in observed.spares if p.role == role]
        )
        for role in gang.spec.roles()
    ]
    return JobStatus(
        phase=phase_of(draft.conditions), conditions=draft.conditions.items, replica_statuses=replicas,
        replicas_ready=f"{ready}/{len(gang.members)}", attempt=attempt, created_attempt=draft.created_attempt,
        restarts=draft.restarts, last_restart=draft.last_restart, preflight=preflight_of(old.preflight, current, attempt),
        nccl=old.nccl, progress=progress, elastic=elastic_of(old, gang, attempt, decision.replaced),
        avoided_nodes=draft.avoided_nodes, broken_since=broken_since, start_time=draft.start_time,
        completion_time=draft.completion_time, observed_generation=draft.conditions.generation,
    )  # fmt: skip
