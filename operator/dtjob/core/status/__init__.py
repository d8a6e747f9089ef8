"""The job's next status and the Events its transitions deserve. Pure.

Conditions have the metav1.Condition shape; a condition keeps its lastTransitionTime while its status
stays the same, and is added only once it first becomes True (absent reads as False). The phase is a
summary of the conditions, for `kubectl get`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from dtjob.api import (
    Condition,
    ConditionType,
    DistributedTrainingJobSpec,
    ElasticStatus,
    JobStatus,
    LastRestart,
    Phase,
    PreflightResult,
    Progress,
    Replacement,
    ReplicaStatus,
    Role,
    timestamp,
)
from dtjob.api.semantics import checkpoint_warnings
from dtjob.core.decide import Action, Decision, Reason
from dtjob.core.frameworks import Gang
from dtjob.core.observed import ACTIVE_STATES, ENDED_ABNORMALLY, Observed, PodState, PodView
from dtjob.core.progress import SlowRank
from dtjob.core.render import PLACEMENT_GROUP_NODE_LABEL

ConditionStatus = Literal["True", "False", "Unknown"]
WARNING_CONDITIONS: Final = frozenset(
    {
        ConditionType.FAILED,
        ConditionType.INVALID,
        ConditionType.UNSCHEDULABLE,
        ConditionType.CHECKPOINT_NOT_SHARED,
        ConditionType.SLOW_RANK,
    }
)
# Conditions whose return to False is news of its own (the others go False as a side effect of another event).
NEWSWORTHY_FALSE: Final = frozenset({ConditionType.SUSPENDED, ConditionType.INVALID})
FINISHING: Final = {Action.COMPLETE: ConditionType.SUCCEEDED, Action.FAIL: ConditionType.FAILED,
                    Action.DEADLINE_EXCEEDED: ConditionType.FAILED}  # fmt: skip


# Reasons of the Invalid condition: the spec breaks a rule the operator checks, or the apiserver refused
# a pod rendered from it (a field of the pod template only the apiserver validates).
INVALID_SPEC: Final = "InvalidSpec"
POD_REFUSED: Final = "PodRefused"


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class _Conditions:
    """The condition list being edited in one pass."""

    def __init__(self, old: list[Condition], now: datetime, generation: int | None) -> None:
        self.items = list(old)
        self.now, self.generation = timestamp(now), generation

    def set(self, type_: ConditionType, status: ConditionStatus, reason: str, message: str = "") -> None:
        for i, old in enumerate(self.items):
            if old.type == type_:
                when = old.last_transition_time if old.status == status else self.now
                self.items[i] = self._make(type_, status, reason, message, when)
                return
        if status == "True":
            self.items.append(self._make(type_, status, reason, message, self.now))

    def is_true(self, type_: ConditionType) -> bool:
        return any(c.type == type_ and c.status == "True" for c in self.items)

    def _make(
        self, type_: ConditionType, status: ConditionStatus, reason: str, message: str, when: str
    ) -> Condition:
        return Condition(type=type_, status=status, reason=reason, message=message[:32768],
                         last_transition_time=when, observed_generation=self.generation)  # fmt: skip


def next_status(
    old: JobStatus,
    gang: Gang,
    observed: Observed,
    decision: Decision,
    now: datetime,
    generation: int | None,
    queued: bool = False,
    admitted: str | None = None,
    progress: Progress | None = None,
    slow: tuple[SlowRank, ...] | None = None,
) -> JobStatus:
    """The status after carrying out `decision`: counters, times, per-role counts and conditions.
    `queued`: the job is in a Kueue queue; `admitted`: what Kueue's admission says, once it admitted it;
    `progress`: the training progress to show (see progress.carried); `slow`: the slow ranks of the
    current attempt (see progress.slow_ranks; None: not judged)."""
    action = decision.action
    # A job waiting for Kueue is held as a suspended one is (no pods), under a condition of its own.
    holding = ConditionType.QUEUED if decision.reason == Reason.QUEUED else ConditionType.SUSPENDED
    conditions = _Conditions(old.conditions, now, generation)
    conditions.set(ConditionType.INVALID, "False", "ValidSpec", "the spec is valid")
    if warnings := checkpoint_warnings(gang.spec):
        conditions.set(
            ConditionType.CHECKPOINT_NOT_SHARED, "True", "CheckpointNotShared", "\n".join(warnings)
        )
    else:
        conditions.set(
            ConditionType.CHECKPOINT_NOT_SHARED, "False", "CheckpointShared", "checkpoints are shared"
        )
    attempt, restarts, last_restart = old.attempt, old.restarts, old.last_restart
    avoided_nodes = old.avoided_nodes
    start_time, completion_time = old.start_time, old.completion_time
    still_suspended = action == Action.SUSPEND and holding == ConditionType.SUSPENDED
    resumed = old.is_true(ConditionType.SUSPENDED) and not still_suspended
    started = old.created_attempt == attempt or bool(observed.of_attempt(attempt))
    if action == Action.SUSPEND and not old.is_true(holding) and started:
        # Suspending ends the attempt: its pods, deleted now, are stale ones to wait for on resume, not
        # lost members of the resumed gang, which starts afresh (from the checkpoint) as the next attempt.
        # Its pods count as its start too: a leader taken away after creating them never recorded it.
        attempt += 1

    if action == Action.RESTART_GANG:
        attempt += 1
        preempted = decision.reason == Reason.PREEMPTED
        hung = decision.reason == Reason.PROGRESS_DEADLINE_EXCEEDED
        moved = decision.reason == Reason.SLOW_RANK
        restarts = restarts.model_copy(
            update={
                "failures": restarts.failures + (not preempted and not hung and not moved),
                "preemptions": restarts.preemptions + preempted,
                "hangs": restarts.hangs + hung,
                "slow_ranks": restarts.slow_ranks + moved,
                "total": restarts.total + 1,
            }
        )
        if decision.avoid is not None and decision.avoid not in avoided_nodes:
            avoided_nodes = [*avoided_nodes, decision.avoid]
        last_restart = LastRestart(
            reason=decision.reason,
            message=decision.message,
            time=timestamp(now),
            step=decision.step,
            failures=list(decision.failures),
            in_place=decision.in_place or None,
        )
        conditions.set(
            ConditionType.RESTARTING, "True", decision.reason, f"attempt {attempt}: {decision.message}"
        )
        conditions.set(ConditionType.RUNNING, "False", "Restarting", decision.message)
    if action == Action.FAIL and decision.reason == Reason.PREFLIGHT_FAILED:
        # Its own counter: the fabric failed, not the code, so backoffLimit and total are left alone. Counted
        # once: a failed job is finished, and no later pass decides FAIL again.
        restarts = restarts.model_copy(update={"preflight_failures": restarts.preflight_failures + 1})
    if decision.reason == Reason.SETTLING:
        conditions.set(ConditionType.RESTARTING, "True", decision.reason, decision.message)
        conditions.set(ConditionType.RUNNING, "False", "MemberEnded", decision.message)
    broken_since = (old.broken_since or timestamp(now)) if decision.reason == Reason.SETTLING else None
    current = observed.of_attempt(attempt)
    present = {p.member for p in current}
    # From here on a missing pod of this attempt is a lost member, not one still to create. All present
    # counts too: an operator that stopped (or whose status write was refused as outdated) between
    # creating the pods and recording it records it now, start time and all.
    all_present = action in (Action.CREATE_MISSING, Action.WAIT) and all(
        m.pod in present for m in gang.members
    )
    created_attempt = attempt if action == Action.CREATE_MISSING or all_present else old.created_attempt
    if action == Action.CREATE_MISSING or (all_present and old.created_attempt != attempt):
        kept = f"; {', '.join(decision.kept)} train on in place" if decision.kept else ""
        kept += "".join(f"; spare {spare} takes the rank of {member}" for spare, member in decision.takeovers)
        conditions.set(
            ConditionType.CREATED, "True", "Created", f"created the pods of attempt {attempt}{kept}"
        )
        if start_time is None:
            start_time = timestamp(now)
    if resumed:
        start_time = timestamp(now)  # activeDeadlineSeconds counts from the resume, as for a Job
        conditions.set(ConditionType.SUSPENDED, "False", "Resumed", "the job was resumed")
    if action == Action.SUSPEND:
        conditions.set(holding, "True", decision.reason, decision.message)
        conditions.set(ConditionType.RUNNING, "False", holding.value, decision.message)
    if old.finished or action in FINISHING:
        pass  # a finished job's Workload is Finished too: the Admitted condition says how it ran
    elif queued and admitted is None:
        conditions.set(ConditionType.ADMITTED, "False", "NotAdmitted", decision.message)
    elif admitted is not None:
        conditions.set(ConditionType.QUEUED, "False", "Admitted", admitted)
        conditions.set(ConditionType.ADMITTED, "True", "Admitted", admitted)
    if action in FINISHING:
        completion_time = completion_time or timestamp(now)
        conditions.set(FINISHING[action], "True", decision.reason, decision.message)
        conditions.set(ConditionType.RUNNING, "False", FINISHING[action], decision.message)
        conditions.set(ConditionType.RESTARTING, "False", FINISHING[action], decision.message)

    if (
        action in (Action.CREATE_MISSING, Action.WAIT)
        and not old.finished
        and _all_running(gang, observed, attempt)
    ):
        running = f"{len(gang.members)}/{len(gang.members)} pods of attempt {attempt} are running"
        conditions.set(ConditionType.RUNNING, "True", "AllReplicasRunning", running)
        conditions.set(ConditionType.RESTARTING, "False", "AllReplicasRunning", running)
    if (
        action in (Action.CREATE_MISSING, Action.WAIT, Action.REPLACE_MEMBERS, Action.SUSPEND)
        and not old.finished
    ):
        # A suspended job's pods are going: none of them waits for a node any more.
        live = () if action == Action.SUSPEND else current
        _set_schedulability(conditions, live, gang.spec)

    if not old.finished and action not in FINISHING:
        # A restart's new attempt is not judged yet: the slow ranks were the ended attempt's.
        _set_slow_rank(conditions, slow if attempt == gang.attempt else None, current, attempt)
    if decision.replaced:
        restarts = restarts.model_copy(
            update={"replacements": restarts.replacements + len(decision.replaced)}
        )
    preflight = _preflight(old.preflight, current, attempt)
    ready = sum(1 for p in current if p.state == PodState.READY and not p.terminating)
    return JobStatus(
        phase=_phase(conditions),
        conditions=conditions.items,
        replica_statuses=[
            _replica_status(
                role, [p for p in current if p.role == role], [p for p in observed.spares if p.role == role]
            )
            for role in gang.spec.roles()
        ],
        replicas_ready=f"{ready}/{len(gang.members)}",
        attempt=attempt,
        created_attempt=created_attempt,
        restarts=restarts,
        last_restart=last_restart,
        preflight=preflight,
        nccl=old.nccl,
        progress=progress,
        elastic=_elastic(old, gang, attempt, decision.replaced),
        avoided_nodes=avoided_nodes,
        broken_since=broken_since,
        start_time=start_time,
        completion_time=completion_time,
        observed_generation=generation,
    )


def _elastic(
    old: JobStatus, gang: Gang, attempt: int, replaced: tuple[Replacement, ...]
) -> ElasticStatus | None:
    """The elastic mode's status: the bounds torchrun got, and the latest replacement of each member in
    this attempt (a new attempt's gang starts whole)."""
    elastic = gang.spec.torch.elastic
    if elastic is None:
        return None
    kept = old.elastic.replaced if old.elastic is not None and attempt == old.attempt else []
    fresh = {r.pod for r in replaced}
    return ElasticStatus(
        min_replicas=elastic.min_replicas,
        max_replicas=elastic.max_replicas or len(gang.members),
        replaced=[*(r for r in kept if r.pod not in fresh), *replaced],
    )


def invalid_status(
    old: JobStatus, message: str, now: datetime, generation: int | None, reason: str = INVALID_SPEC
) -> JobStatus:
    conditions = _Conditions(old.conditions, now, generation)
    conditions.set(ConditionType.INVALID, "True", reason, message)
    return old.model_copy(
        update={
            "conditions": conditions.items,
            "phase": _phase(conditions),
            "observed_generation": generation,
        }
    )


def transition_events(old: JobStatus, new: JobStatus) -> list[Event]:
    """One Event per gang restart, saying why, and one per condition that changed status otherwise:
    becoming True, or Suspended/Invalid becoming False."""
    before = {c.type: c.status for c in old.conditions}
    events: list[Event] = []
    if new.preflight is not None and new.preflight != old.preflight and new.preflight.passed:
        # A failed one is told by the Failed condition's Event, with the same figures.
        events.append(Event("Normal", "PreflightPassed", f"attempt {new.attempt}: {new.preflight.message}"))
    if new.restarts.replacements > old.restarts.replacements and new.elastic is not None:
        seen = set(old.elastic.replaced) if old.elastic is not None else set()
        for replacement in (r for r in new.elastic.replaced if r not in seen):
            message = f"attempt {new.attempt}: {replacement.message} until a new pod takes its place"
            events.append(Event("Warning", "MemberReplaced", message))
    if new.restarts.total > old.restarts.total and new.last_restart is not None:
        # Even while Restarting is already True (the new gang was preempted before it ran).
        why = new.last_restart
        events.append(Event("Warning", why.reason, f"attempt {new.attempt}: {why.message}"))
    for condition in new.conditions:
        if (
            condition.type == ConditionType.RESTARTING
            and condition.status == "True"
            and (condition.reason != Reason.SETTLING)
        ):
            continue  # told by the restart's own Event above
        if before.get(condition.type, "False") == condition.status:
            continue
        if condition.status == "True" or condition.type in NEWSWORTHY_FALSE:
            warning = condition.status == "True" and condition.type in WARNING_CONDITIONS
            events.append(Event("Warning" if warning else "Normal", condition.reason, condition.message))
    return events


def _preflight(
    old: PreflightResult | None, current: tuple[PodView, ...], attempt: int
) -> PreflightResult | None:
    """The NCCL preflight's figures for this attempt once a pod has them (every rank reports the same:
    the gang's slowest); until then the last attempt's stay."""
    if old is not None and old.attempt == attempt:
        return old
    measured = next((pod.preflight for pod in current if pod.preflight is not None), None)
    return PreflightResult.model_validate({**measured, "attempt": attempt}) if measured else old


def _set_slow_rank(
    conditions: _Conditions, slow: tuple[SlowRank, ...] | None, current: tuple[PodView, ...], attempt: int
) -> None:
    """SlowRank True naming each slow pod, its node and the figures; back to False (only once it was
    True: a job with no slow rank carries no such condition) when none is, or none can be judged."""
    if not slow:
        message = (
            "no rank's own step time is well above the rest of the gang's"
            if slow is not None
            else f"attempt {attempt}: not judged yet (fewer than two ranks report their own step time)"
        )
        conditions.set(ConditionType.SLOW_RANK, "False", "NoSlowRank", message)
        return
    nodes = {p.name: p.node or "unknown" for p in current}
    said = [_slow_said(rank, nodes.get(rank.pod, "unknown")) for rank in slow]
    message = "; ".join(said) + ": the whole gang waits for it in every all-reduce"
    conditions.set(ConditionType.SLOW_RANK, "True", "SlowRank", message)


def _slow_said(rank: SlowRank, node: str) -> str:
    times = f" ({rank.seconds / rank.others:.2g}x)" if rank.others > 0 else ""
    return (
        f"pod {rank.pod} on node {node} takes {rank.seconds:.2g}s of its own work a step against "
        f"{rank.others:.2g}s for the rest of the gang{times}"
    )


# How kube-scheduler's NodeAffinity plugin says that no node has the labels a pod selects.
NODE_SELECTOR_MISMATCH: Final = "didn't match Pod's node affinity/selector"


def _set_schedulability(
    conditions: _Conditions, current: tuple[PodView, ...], spec: DistributedTrainingJobSpec
) -> None:
    """Unschedulable while a live pod waits for a place, with the scheduler's own message (and where the
    pods' compact placement group may be why, what GKE offers); left as it was when the job finishes, so
    a SchedulingTimeout failure keeps the scheduler's word beside it."""
    waiting = [p for p in current if p.unschedulable and not p.terminating]
    if not waiting:
        conditions.set(ConditionType.UNSCHEDULABLE, "False", "Scheduled", "no pod is waiting for a node")
        return
    timeout_seconds = spec.run_policy.scheduling_timeout_seconds
    then = f"; the job fails after schedulingTimeoutSeconds ({timeout_seconds}s)" if timeout_seconds else ""
    names = ", ".join(p.name for p in waiting)
    message = f"{len(waiting)} pod(s) cannot be scheduled ({names}){then}: {waiting[0].message}"
    group = spec.accelerator.placement_group if spec.accelerator else None
    if group and NODE_SELECTOR_MISMATCH in waiting[0].message:
        message += (
            f". The pods select {PLACEMENT_GROUP_NODE_LABEL}={group} (accelerator.placementGroup): on "
            "Autopilot GKE offers compact placement only for some GPUs (its page has named A100, L4 and "
            "H100); on Standard only the nodes of a node pool created with --placement-type=COMPACT carry "
            "that label, so select such a pool in the template instead (docs/gke.md#compact-placement)"
        )
    conditions.set(ConditionType.UNSCHEDULABLE, "True", "PodUnschedulable", message)


def _all_running(gang: Gang, observed: Observed, attempt: int) -> bool:
    """Every pod of the attempt exists and is running (or has already finished well), at least one running."""
    pods = {p.member: p for p in observed.of_attempt(attempt) if not p.terminating}
    states = [pods[m.pod].state if m.pod in pods else None for m in gang.members]
    running = (PodState.RUNNING, PodState.READY)
    return all(s in (*running, PodState.SUCCEEDED) for s in states) and any(s in running for s in states)


def _replica_status(role: Role, pods: list[PodView], spares: list[PodView]) -> ReplicaStatus:
    running = (PodState.RUNNING, PodState.READY)
    return ReplicaStatus(
        role=role,
        active=sum(1 for p in pods if p.state in ACTIVE_STATES and not p.terminating),
        ready=sum(1 for p in pods if p.state == PodState.READY and not p.terminating),
        succeeded=sum(1 for p in pods if p.state == PodState.SUCCEEDED),
        failed=sum(1 for p in pods if p.state in ENDED_ABNORMALLY),
        spares=sum(1 for p in spares if p.state in ACTIVE_STATES and not p.terminating),
        spares_running=sum(1 for p in spares if p.state in running and not p.terminating),
    )


def _phase(conditions: _Conditions) -> Phase:
    for type_, phase in (
        (ConditionType.INVALID, Phase.INVALID),
        (ConditionType.FAILED, Phase.FAILED),
        (ConditionType.SUCCEEDED, Phase.SUCCEEDED),
        (ConditionType.SUSPENDED, Phase.SUSPENDED),
        (ConditionType.QUEUED, Phase.QUEUED),
        (ConditionType.RESTARTING, Phase.RESTARTING),
        (ConditionType.RUNNING, Phase.RUNNING),
    ):
        if conditions.is_true(type_):
            return phase
    return Phase.PENDING
