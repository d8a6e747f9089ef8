"""The one decision of a reconcile pass: what the gang needs next. Pure: plain data in, a Decision out.

Checks run in a fixed order, each able to end the pass: finished (TTL) -> suspended -> deadline ->
success -> a member that ended abnormally or went missing (restart the gang, or fail) -> a gang that
stopped stepping (progressDeadlineSeconds) -> scheduling timeout -> stale pods of an earlier attempt
still present -> missing pods (after the failure backoff) -> wait. What an abnormal end means is `fault_of`'s table: preemption, retryable failure, or permanent.

An abnormal end is judged for the whole gang, not pod by pod: on a node shutdown the peers on other
nodes often crash (the collective broke) before the preempted pod says anything. A break that nothing
explains yet is watched for runPolicy.failureSettleSeconds while members still run; any member seen
disrupted meanwhile makes the restart a preemption. An Evaluator is not part of the training cluster:
its failure restarts nothing (its pod stays for its logs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from dtjob.api import (
    TRAINER_CHECKPOINT_SAVED_EXIT_CODE,
    ConditionType,
    DistributedTrainingJobSpec,
    FailureSignature,
    JobStatus,
    Replacement,
    RestartPolicy,
    RestartStrategy,
    Role,
    SuccessPolicy,
    parse_timestamp,
    timestamp,
)
from dtjob.core.failures import describe, repeated, signatures
from dtjob.core.frameworks import Gang, Member
from dtjob.core.kueue import Queueing
from dtjob.core.kueue import State as QueueState
from dtjob.core.observed import (
    ACTIVE_STATES,
    DAEMON_NOT_READY,
    ENDED_ABNORMALLY,
    IMAGE_ERRORS,
    PREEMPTED_CHECKPOINT_SAVED,
    Observed,
    PodState,
    PodView,
)
from dtjob.core.preflight import FAILED as PREFLIGHT_FAILED
from dtjob.core.progress import Ledger, SlowRank, judge, reached_step, stall_message

# Failure restarts back off: 5 s, 10 s, 20 s ... capped at 5 minutes. Preemption restarts go at once:
# the new pods simply wait Pending for capacity.
BACKOFF_BASE_SECONDS: Final = 5.0
BACKOFF_CAP_SECONDS: Final = 300.0
# What of a pod's termination message goes into an Event and status.lastRestart (an Event's note is
# limited to 1 KiB in events.k8s.io/v1; the rest of the message says where the pod and its logs are).
MESSAGE_TAIL_CHARS: Final = 600
# Roles outside the training cluster: their end neither breaks nor finishes the gang.
OUTSIDE_THE_GANG: Final = frozenset({Role.EVALUATOR})
# Slow-rank restarts keep the gang off at most this many nodes: past that the slowness is more likely the
# job's own (its data, its model split) than the nodes', and ever fewer nodes are left to schedule on.
MAX_AVOIDED_NODES: Final = 3


class Action(StrEnum):
    CREATE_MISSING = "CreateMissing"
    WAIT = "Wait"
    COMPLETE = "Complete"
    FAIL = "Fail"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    SUSPEND = "Suspend"
    RESTART_GANG = "RestartGang"
    REPLACE_MEMBERS = "ReplaceMembers"
    """An elastic gang trains on: its lost members are replaced, each on its own."""
    TTL_EXPIRED = "TTLExpired"


class Fault(StrEnum):
    """What one member's abnormal end means for the gang."""

    PREEMPTION = "Preemption"
    """Kubernetes took the pod away: restart at once, charged to maxPreemptions."""
    RETRYABLE = "Retryable"
    """Restart after the backoff, charged to backoffLimit."""
    PERMANENT = "Permanent"
    """Retrying cannot help: the job fails."""


class Reason(StrEnum):
    """Machine-readable causes; they become condition reasons, so CamelCase."""

    RANK_ZERO_SUCCEEDED = "RankZeroSucceeded"
    ALL_WORKERS_SUCCEEDED = "AllWorkersSucceeded"
    PREEMPTED = "Preempted"
    POD_FAILED = "PodFailed"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    MAX_PREEMPTIONS_EXCEEDED = "MaxPreemptionsExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    SCHEDULING_TIMEOUT = "SchedulingTimeout"
    SUSPENDED = "Suspended"
    FINISHED = "Finished"
    TTL_EXPIRED = "TTLExpired"
    WAITING_FOR_PREVIOUS_ATTEMPT = "WaitingForPreviousAttempt"
    BACKING_OFF = "BackingOff"
    CREATING = "Creating"
    IN_PROGRESS = "InProgress"
    PREFLIGHT_FAILED = "PreflightFailed"
    SETTLING = "Settling"
    """A member ended with no disruption in sight: the gang is watched before a failure is charged."""
    QUEUED = "Queued"
    """Kueue has not admitted the gang (or took its admission back): no pod may exist."""
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    """Every member ran, and the step did not advance for runPolicy.progressDeadlineSeconds."""
    REPEATED_FAILURE = "RepeatedFailure"
    """Two attempts in a row failed the same way (runPolicy.stopOnRepeatedFailure)."""
    SLOW_RANK = "SlowRank"
    """A rank stayed slow for runPolicy.slowRankRestartSeconds: the gang moves off its node."""
    MEMBER_REPLACED = "MemberReplaced"
    """An elastic gang lost members it can train without (spec.torch.elastic): they are replaced."""
    WORKLOAD_FINISHED = "WorkloadFinished"
    """The job's Kueue Workload was marked Finished while the job had not ended: Kueue never admits it
    again (its jobframework does so when a job cannot start: FailedToStart)."""


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: Reason
    message: str = ""
    requeue_after: float | None = None
    """Seconds until a time-based check (deadline, TTL, backoff, scheduling timeout) is due."""
    vanished: tuple[str, ...] = ()
    """The members this decision takes for lost because no pod of them was seen: a cache can lag, so
    they are to be confirmed gone (a fresh listing) before the decision is acted on."""
    step: int | None = None
    """For a gang restart: the step the attempt had reached (the progress reports')."""
    failures: tuple[FailureSignature, ...] = ()
    """For a failure restart: how the members failed, to tell the next attempt's failure from."""
    avoid: str | None = None
    """For a restart off a slow rank's node, or off a node whose GPUDirect daemon never became ready: the
    node the next attempts' pods are kept off."""
    replaced: tuple[Replacement, ...] = ()
    """For an elastic gang's replacement: the members whose loss this pass sees first."""
    in_place: bool = False
    """For a gang restart: the members still running keep their pods (runPolicy.restartStrategy InPlace)."""
    kept: tuple[str, ...] = ()
    """For the creation of an in-place restart's attempt: the pods moved to it, which train on."""
    takeovers: tuple[tuple[str, str], ...] = ()
    """For the creation of an attempt: (spare, member) for each hot spare that takes a missing member's
    rank instead of a new pod (spec.replicas[].spares), named as the spare and the member's pod are."""


def decide(
    spec: DistributedTrainingJobSpec,
    status: JobStatus,
    gang: Gang,
    observed: Observed,
    now: datetime,
    queueing: Queueing | None = None,
    ledger: Ledger | None = None,
    slow: tuple[SlowRank, ...] | None = None,
) -> Decision:
    """`queueing`: where Kueue stands with the job's Workload, for a job in a Kueue queue; `ledger`: the
    trainers' latest progress reports; `slow`: the slow ranks they show (progress.slow_ranks, judged once
    a pass)."""
    timers: list[float] = []
    policy = spec.run_policy

    if status.finished:
        if policy.ttl_seconds_after_finished is not None and status.completion_time:
            due = parse_timestamp(status.completion_time) + timedelta(
                seconds=policy.ttl_seconds_after_finished
            )
            if now >= due:
                return Decision(Action.TTL_EXPIRED, Reason.TTL_EXPIRED, "ttlSecondsAfterFinished has passed")
            timers.append((due - now).total_seconds())
        return Decision(Action.WAIT, Reason.FINISHED, requeue_after=_soonest(timers))

    if policy.suspend:
        return Decision(Action.SUSPEND, Reason.SUSPENDED, "the job is suspended: its pods are deleted")

    if queueing is not None and queueing.state == QueueState.FINISHED:
        # Not this operator's doing (it marks the Workload only once the job has ended): the quota is
        # released, and waiting Queued would be waiting for good. The job ends, saying why.
        message = f"its Kueue Workload was marked Finished before the job ended: {queueing.message}"
        return Decision(Action.FAIL, Reason.WORKLOAD_FINISHED, message)

    if queueing is not None and queueing.state != QueueState.ADMITTED:
        live = [
            p for p in observed.of_attempt(gang.attempt) if p.state in ACTIVE_STATES and not p.terminating
        ]
        if queueing.state == QueueState.EVICTED and live:
            # Kueue's eviction (priority preemption, quota reclaimed, a check retracted) is an interruption
            # the trainers did not cause: a preemption, after which the gang waits to be admitted again.
            return Decision(Action.RESTART_GANG, Reason.PREEMPTED, f"evicted by Kueue: {queueing.message}")
        return Decision(Action.SUSPEND, Reason.QUEUED, queueing.message)

    if policy.active_deadline_seconds is not None and status.start_time:
        due = parse_timestamp(status.start_time) + timedelta(seconds=policy.active_deadline_seconds)
        if now >= due:
            message = (
                f"the job was active longer than activeDeadlineSeconds ({policy.active_deadline_seconds}s)"
            )
            return Decision(Action.DEADLINE_EXCEEDED, Reason.DEADLINE_EXCEEDED, message)
        timers.append((due - now).total_seconds())

    current = {p.member: p for p in observed.of_attempt(gang.attempt)}
    if (success := _success(spec, gang, current)) is not None:
        return success

    training = [m for m in gang.members if m.role not in OUTSIDE_THE_GANG]
    ended = [
        current[m.pod] for m in training if m.pod in current and current[m.pod].state in ENDED_ABNORMALLY
    ]
    vanished = _vanished(training, gang.attempt, status, current)
    step = reached_step(ledger, status.progress, gang.attempt)
    if ended := ended + vanished:
        decision = _replace_members(spec, status, gang, ended, current, now) or _on_abnormal_end(
            spec, status, _by_end(ended), current, now, step
        )
        return replace(decision, vanished=tuple(pod.name for pod in vanished))

    if (deadline := policy.progress_deadline_seconds) is not None and _all_running(training, current):
        clock = judge(ledger, status.progress, gang.attempt, deadline, now)
        if clock.stall is not None:
            cause = stall_message(clock.stall, deadline, now)
            if status.restarts.hangs >= policy.max_hang_restarts:
                message = f"maxHangRestarts ({policy.max_hang_restarts}) reached; last: {cause}"
                return Decision(Action.FAIL, Reason.PROGRESS_DEADLINE_EXCEEDED, message)
            return Decision(Action.RESTART_GANG, Reason.PROGRESS_DEADLINE_EXCEEDED, cause, step=step)
        if clock.left is not None:
            timers.append(clock.left)

    if (slow_after := policy.slow_rank_restart_seconds) is not None and _all_running(training, current):
        moving = _off_a_slow_node(status, current, slow, slow_after, now)
        if isinstance(moving, Decision):
            return replace(moving, step=step)
        if moving is not None:
            timers.append(moving)

    if policy.scheduling_timeout_seconds is not None:
        limit = timedelta(seconds=policy.scheduling_timeout_seconds)
        for pod in current.values():
            if pod.unschedulable and pod.created is not None:
                if now >= pod.created + limit:
                    message = f"pod {pod.name} was not scheduled within {policy.scheduling_timeout_seconds}s: {pod.message}"
                    return Decision(Action.FAIL, Reason.SCHEDULING_TIMEOUT, message)
                timers.append((pod.created + limit - now).total_seconds())

    kept_pods = kept_in_place(status, observed)
    kept, kept_members = {p.name for p in kept_pods}, {p.member for p in kept_pods}
    # An Evaluator that went (or failed and was deleted) is simply created again: nothing depends on it.
    absent = [m for m in gang.members if m.pod not in current and m.pod not in kept_members]
    takeovers = _takeovers(absent, observed.spares) if absent and observed.spares else ()
    taken = {member for _, member in takeovers}
    missing = [m.pod for m in absent if m.pod not in taken]
    # Under InPlace a pod of an earlier attempt that is not kept can join no later rendezvous (the ranks
    # meet under their attempt's prefix, and only kept pods and spares are moved to it): only its name
    # is in the way, of a member's pod to create.
    lingering = spec.run_policy.restart_strategy == RestartStrategy.IN_PLACE
    if stale := [
        p
        for p in observed.not_of_attempt(gang.attempt)
        if p.name not in kept and not (lingering and p.name not in missing)
    ]:
        names = ", ".join(p.name for p in stale)
        message = f"waiting for pods of an earlier attempt to go: {names}"
        return Decision(Action.WAIT, Reason.WAITING_FOR_PREVIOUS_ATTEMPT, message, _soonest(timers))

    if missing or kept or takeovers:
        if (wait := _backoff_remaining(status, now)) > 0:
            message = f"restarting after a failure; next attempt in {wait:.0f}s"
            return Decision(Action.WAIT, Reason.BACKING_OFF, message, _soonest([*timers, wait]))
        message = "; ".join(
            part
            for part in (
                f"creating {', '.join(missing)}" if missing else "",
                *(f"spare {spare} takes the rank of {member}" for spare, member in takeovers),
                f"{', '.join(sorted(kept))} train on in place" if kept else "",
            )
            if part
        )
        return Decision(
            Action.CREATE_MISSING,
            Reason.CREATING,
            message,
            _soonest(timers),
            kept=tuple(sorted(kept)),
            takeovers=takeovers,
        )

    return Decision(Action.WAIT, Reason.IN_PROGRESS, requeue_after=_soonest(timers))


def kept_in_place(status: JobStatus, observed: Observed) -> tuple[PodView, ...]:
    """The pods of the attempt before an in-place restart (status.lastRestart.inPlace) that the current
    attempt keeps: still running, not being deleted or taken away. The others go, as in any restart; these
    are relabelled with the current attempt once the others are gone, and their trainers train on."""
    last = status.last_restart
    if last is None or not last.in_place:
        return ()
    running = (PodState.RUNNING, PodState.READY)
    return tuple(
        p
        for p in observed.not_of_attempt(status.attempt)
        if p.attempt == status.attempt - 1
        and p.state in running
        and not p.terminating
        and not p.disruption
        and p.role not in OUTSIDE_THE_GANG
    )


def _takeovers(absent: list[Member], spares: tuple[PodView, ...]) -> tuple[tuple[str, str], ...]:
    """The hot spares that take the ranks of the absent members, each the first running one of the
    member's role (ready first, then by name): only a spare whose trainer runs can take a rank at once;
    a member with no such spare gets a new pod."""
    running = (PodState.RUNNING, PodState.READY)
    free = sorted(
        (
            p
            for p in spares
            if p.state in running and not p.terminating and not p.disruption and not p.node_silent
        ),
        key=lambda p: (p.state != PodState.READY, p.name),
    )
    pairs: list[tuple[str, str]] = []
    for member in absent:
        spare = next((p for p in free if p.role == member.role), None)
        if spare is not None:
            free.remove(spare)
            pairs.append((spare.name, member.pod))
    return tuple(pairs)


def _in_place(spec: DistributedTrainingJobSpec, ended: list[PodView], current: dict[str, PodView]) -> bool:
    """runPolicy.restartStrategy InPlace, unless a member's processes may still hold a collective open:
    its node went silent or is gone (NodeLost, or not Ready yet), or it went before its end was seen
    (Vanished). Their peers may be stuck in that collective: the whole gang is recreated."""
    return spec.run_policy.restart_strategy == RestartStrategy.IN_PLACE and not any(
        pod.reason == "Vanished" or pod.node_silent for pod in (*ended, *current.values())
    )


def _replace_members(
    spec: DistributedTrainingJobSpec,
    status: JobStatus,
    gang: Gang,
    ended: list[PodView],
    current: dict[str, PodView],
    now: datetime,
) -> Decision | None:
    """An elastic gang's lost members (preempted, or deleted or gone) replaced while the rest trains on;
    None when the gang must restart (or fail) as any other: not elastic, the rendezvous host lost (every
    torchrun hangs on its store), a member that failed (its torchrun's own restarts ran out: the code, not
    the capacity), or fewer than minReplicas members left running. Replacements seen in an earlier pass
    (status.elastic.replaced) are not counted again: their pods are still going, or are to be created."""
    elastic = spec.torch.elastic
    if elastic is None:
        return None
    restart_policy = spec.run_policy.restart_policy
    if any(
        pod.name == gang.rank_zero.pod
        or (pod.state != PodState.LOST and fault_of(pod, restart_policy)[0] != Fault.PREEMPTION)
        for pod in ended
    ):
        return None
    lost = {pod.name for pod in ended}
    running = (PodState.RUNNING, PodState.READY)
    left = [
        pod
        for name, pod in current.items()
        if name not in lost and pod.state in running and not pod.terminating
    ]
    if len(left) < elastic.min_replicas:
        return None
    recorded = status.elastic.replaced if status.elastic is not None else []
    # A member gone before its end was seen (no uid) is known by name: its record's pod went.
    known = {(r.pod, r.uid) for r in recorded} | {(r.pod, "") for r in recorded}
    # What the MemberReplaced Event says, once: the replacement's record keeps it.
    train_on = f"the other {len(left)} members train on (spec.torch.elastic: at least {elastic.min_replicas})"
    new = tuple(
        Replacement(pod=pod.name, uid=pod.uid, reason=pod.state, message=f"{_describe(pod)}; {train_on}",
                    time=timestamp(now))
        for pod in ended
        if (pod.name, pod.uid) not in known
    )  # fmt: skip
    return Decision(Action.REPLACE_MEMBERS, Reason.MEMBER_REPLACED, replaced=new)


def _off_a_slow_node(
    status: JobStatus,
    current: dict[str, PodView],
    slow: tuple[SlowRank, ...] | None,
    after_seconds: int,
    now: datetime,
) -> Decision | float | None:
    """A restart without the slowest rank's node once SlowRank has been True for `after_seconds` (and the
    reports still say so); else the seconds until then, or None when there is nothing to wait for."""
    condition = status.condition(ConditionType.SLOW_RANK)
    if not slow:
        return None
    if condition is None or condition.status != "True":
        return float(after_seconds)  # it turns True in this pass: its clock starts now
    since = parse_timestamp(condition.last_transition_time)
    if (left := (since + timedelta(seconds=after_seconds) - now).total_seconds()) > 0:
        return left
    by_name = {p.name: p for p in current.values()}
    nodes = {rank.pod: by_name[rank.pod].node for rank in slow if rank.pod in by_name}
    candidates = [r for r in slow if nodes.get(r.pod) and nodes[r.pod] not in status.avoided_nodes]
    if not candidates or len(status.avoided_nodes) >= MAX_AVOIDED_NODES:
        return None
    rank = max(candidates, key=lambda r: r.seconds - r.others)
    node = nodes[rank.pod]
    message = (
        f"pod {rank.pod} on node {node} stayed slow for {after_seconds}s ({rank.seconds:.2f}s of its own "
        f"work a step against {rank.others:.2f}s for the rest of the gang): restarting the gang without "
        f"node {node} (runPolicy.slowRankRestartSeconds)"
    )
    return Decision(Action.RESTART_GANG, Reason.SLOW_RANK, message, avoid=node)


def _all_running(members: list[Member], current: dict[str, PodView]) -> bool:
    running = (PodState.RUNNING, PodState.READY)
    return all(
        m.pod in current and current[m.pod].state in running and not current[m.pod].terminating
        for m in members
    )


def backoff_seconds(failures: int) -> float:
    """Delay before the attempt that follows the `failures`-th failure restart."""
    delay: float = BACKOFF_BASE_SECONDS * 2.0 ** max(failures - 1, 0)
    return min(delay, BACKOFF_CAP_SECONDS)


def _backoff_remaining(status: JobStatus, now: datetime) -> float:
    last = status.last_restart
    if last is None or last.reason != Reason.POD_FAILED:
        return 0.0
    due = parse_timestamp(last.time) + timedelta(seconds=backoff_seconds(status.restarts.failures))
    remaining: float = (due - now).total_seconds()
    return max(0.0, remaining)


def _success(spec: DistributedTrainingJobSpec, gang: Gang, current: dict[str, PodView]) -> Decision | None:
    def succeeded(pod: str) -> bool:
        return pod in current and current[pod].state == PodState.SUCCEEDED

    if spec.run_policy.success_policy == SuccessPolicy.RANK_ZERO:
        if succeeded(gang.rank_zero.pod):
            pod = current[gang.rank_zero.pod].name  # a spare that took rank 0 keeps its own name
            return Decision(Action.COMPLETE, Reason.RANK_ZERO_SUCCEEDED, f"rank-0 pod {pod} succeeded")
        return None
    workers = [m.pod for m in gang.of_role(Role.WORKER)]
    if workers and all(succeeded(pod) for pod in workers):
        return Decision(
            Action.COMPLETE, Reason.ALL_WORKERS_SUCCEEDED, f"all {len(workers)} Worker pods succeeded"
        )
    return None


def fault_of(pod: PodView, restart_policy: RestartPolicy) -> tuple[Fault, str]:
    """What one member's abnormal end means for the gang, and a note saying why when it is not obvious.

    A pod lost without a word (deleted, or gone before its end was seen) is a failure, as in a Kubernetes
    Job: an eviction or a lost node says so on the pod (DisruptionTarget, a missing node) and is a
    preemption; what says nothing may as well be a controller or a person deleting a hung rank. The
    trainer's own word that it was stopped by SIGTERM and saved a checkpoint (exit code 200, or its
    termination message, which torchrun's exit code 1 does not change) is a preemption.
    """
    if pod.state == PodState.PREEMPTED:
        return Fault.PREEMPTION, ""
    if pod.deleted_by_hand:
        if restart_policy == RestartPolicy.NEVER:
            return Fault.PERMANENT, "restartPolicy Never"
        return Fault.RETRYABLE, ""
    if pod.reason == PREEMPTED_CHECKPOINT_SAVED or pod.exit_code == TRAINER_CHECKPOINT_SAVED_EXIT_CODE:
        return Fault.PREEMPTION, "the trainer was stopped by SIGTERM and saved a checkpoint"
    if pod.reason in IMAGE_ERRORS:
        return Fault.PERMANENT, "image errors that persist are permanent"
    if restart_policy == RestartPolicy.NEVER:
        return Fault.PERMANENT, "restartPolicy Never"
    if restart_policy == RestartPolicy.EXIT_CODE and pod.exit_code is not None and 1 <= pod.exit_code <= 127:
        return Fault.PERMANENT, "exit codes 1-127 are permanent under restartPolicy ExitCode"
    return Fault.RETRYABLE, ""


def _vanished(
    members: list[Member], attempt: int, status: JobStatus, current: dict[str, PodView]
) -> list[PodView]:
    """Members missing from an attempt whose pods were all created: lost before their end was seen."""
    if status.created_attempt != attempt:
        return []  # still being created: a missing pod is simply created
    message = "the pod is gone before its end was seen (deleted, or removed with its node)"
    return [
        PodView(name=m.pod, uid="", role=m.role, index=m.index, attempt=attempt,
                state=PodState.LOST, reason="Vanished", message=message)
        for m in members if m.pod not in current
    ]  # fmt: skip


def _by_end(pods: list[PodView]) -> list[PodView]:
    """The first to end first (the root cause: its peers crash after it), in member order on a tie (the
    kubelet's finishedAt has seconds), those with no end time (lost) last."""
    return sorted(pods, key=lambda p: (p.ended_at is None, p.ended_at.timestamp() if p.ended_at else 0.0))


def _on_abnormal_end(
    spec: DistributedTrainingJobSpec,
    status: JobStatus,
    ended: list[PodView],
    current: dict[str, PodView],
    now: datetime,
    step: int | None,
) -> Decision:
    """A gang cannot lose a member: restart it whole, or fail. A preemption explains its peers' failures
    (they lose a rank and crash), so any preemption makes the restart a preemption, and so does a member
    seen being disrupted before the settle window is over; among failures, a permanent one is the root
    cause (its peers were killed or timed out after it), else the first to end. `ended`: the first to
    end first; `step`: the furthest step the attempt reached."""
    policy = spec.run_policy
    faults = [(pod, *fault_of(pod, policy.restart_policy)) for pod in ended]
    # A member deleted without a word stops its peers as a preemption would (on SIGTERM they save and
    # exit 200): then only Kubernetes' own word makes it a preemption, not the trainers'.
    deleted = any(pod.deleted_by_hand for pod in ended)
    preempted = [
        (pod, note)
        for pod, fault, note in faults
        if fault == Fault.PREEMPTION and (pod.state == PodState.PREEMPTED or not deleted)
    ]
    disrupted = [pod for pod in current.values() if pod.disruption and pod.state in ACTIVE_STATES]
    if preempted or disrupted:
        if preempted:
            cause = _describe(preempted[0][0]) + (f" ({preempted[0][1]})" if preempted[0][1] else "")
        else:
            cause = f"pod {disrupted[0].name} is being taken away ({disrupted[0].disruption}); " + (
                f"its peers ended after it: {_describe(ended[0])}"
            )
        if status.restarts.preemptions >= policy.max_preemptions:
            return Decision(
                Action.FAIL,
                Reason.MAX_PREEMPTIONS_EXCEEDED,
                f"maxPreemptions ({policy.max_preemptions}) reached; last: {cause}",
            )
        avoid = _bad_node(status, ended)
        then = f"; the next attempts keep off node {avoid}" if avoid else ""
        return Decision(
            Action.RESTART_GANG,
            Reason.PREEMPTED,
            cause + then,
            step=step,
            avoid=avoid,
            in_place=_in_place(spec, ended, current) and avoid is None,
        )

    if preflight := next((pod for pod in ended if pod.reason == PREFLIGHT_FAILED), None):
        # The network, not the code: failing fast beats restarting onto the same fabric (and is not
        # charged to backoffLimit).
        return Decision(Action.FAIL, Reason.PREFLIGHT_FAILED, _describe(preflight))
    root = next((f for f in faults if f[0].deleted_by_hand), faults[0])
    failed, fault, note = next((f for f in faults if f[1] == Fault.PERMANENT), root)
    cause = _describe(failed) + (f" ({note})" if note else "")
    if (settling := _settling(policy.failure_settle_seconds, status, ended, current, now)) is not None:
        message = (
            f"{cause}; watching the gang for a disruption for up to {policy.failure_settle_seconds}s "
            "before charging a failure"
        )
        return Decision(Action.WAIT, Reason.SETTLING, message, settling)
    if fault == Fault.PERMANENT:
        return Decision(Action.FAIL, Reason.POD_FAILED, cause)
    if status.restarts.failures >= policy.backoff_limit:
        return Decision(
            Action.FAIL,
            Reason.BACKOFF_LIMIT_EXCEEDED,
            f"backoffLimit ({policy.backoff_limit}) reached; last: {cause}",
        )
    failures = signatures(pod for pod in ended if not pod.deleted_by_hand)
    if policy.stop_on_repeated_failure and (same := repeated(status.last_restart, failures, step)):
        return Decision(Action.FAIL, Reason.REPEATED_FAILURE, _repeated_message(status, same, step, cause))
    return Decision(
        Action.RESTART_GANG,
        Reason.POD_FAILED,
        cause,
        backoff_seconds(status.restarts.failures + 1),
        step=step,
        failures=failures,
        in_place=_in_place(spec, ended, current),
    )


def _bad_node(status: JobStatus, ended: list[PodView]) -> str | None:
    """The node of a member whose GPUDirect daemon never became ready there (its host components are
    broken): the gang restarts without it, as off a slow rank's node, at most MAX_AVOIDED_NODES in all."""
    if len(status.avoided_nodes) >= MAX_AVOIDED_NODES:
        return None
    return next((p.node for p in ended if p.reason == DAEMON_NOT_READY and p.node), None)


def _repeated_message(status: JobStatus, same: FailureSignature, step: int | None, cause: str) -> str:
    before = status.last_restart.step if status.last_restart is not None else None
    at = (
        ""
        if step is None
        else f" at step {step}" + (f" (the one before at {before})" if before != step else "")
    )
    return (
        f"attempts {status.attempt - 1} and {status.attempt} failed the same way{at}: {describe(same)}; "
        f"another attempt would too (runPolicy.stopOnRepeatedFailure); last: {cause}"
    )


def _settling(
    settle_seconds: int,
    status: JobStatus,
    ended: list[PodView],
    current: dict[str, PodView],
    now: datetime,
) -> float | None:
    """Seconds left to watch a broken gang before charging a failure; None when the charge is due now:
    the window is over, no member still runs (nothing more will be said), or the only ends are image
    errors (a pod that never ran breaks no collective)."""
    if not any(pod.state in ACTIVE_STATES for pod in current.values()):
        return None
    if all(pod.reason in IMAGE_ERRORS for pod in ended):
        return None
    since = parse_timestamp(status.broken_since) if status.broken_since else now
    left = (since + timedelta(seconds=settle_seconds) - now).total_seconds()
    return left if left > 0 else None


def _describe(pod: PodView) -> str:
    """The pod, how it ended and the end of what it said (its termination message: with
    FallbackToLogsOnError, a crashed trainer's last log lines)."""
    parts = [f"pod {pod.name}: {pod.reason or pod.state}"]
    if pod.exit_code is not None:
        parts.append(f"exit code {pod.exit_code}")
    if pod.node:
        parts.append(f"on node {pod.node}")
    text = " ".join(parts[:1]) + (", " + ", ".join(parts[1:]) if parts[1:] else "")
    return f"{text}: {tail(pod.message)}" if pod.message.strip() else text


def tail(text: str, limit: int = MESSAGE_TAIL_CHARS) -> str:
    """The last lines of `text` that fit in `limit` characters (a Python traceback ends with the error)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    return "..." + (cut[cut.index("\n") :] if "\n" in cut else cut)


def _soonest(timers: list[float]) -> float | None:
    return min(timers) if timers else None
