"""What a decision is (its action, its reason, what it carries) and what a rule reads to make one (Facts)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType
from typing import Final

from dtjob.api import DistributedTrainingJobSpec, FailureSignature, JobStatus, Replacement, Role
from dtjob.api.spec import RunPolicy
from dtjob.core.frameworks import Gang, Member
from dtjob.core.kueue import Queueing
from dtjob.core.observed import Observed, PodState, PodView
from dtjob.core.progress import Ledger, SlowRank, reached_step

# Roles outside the training cluster: their end neither breaks nor finishes the gang.
OUTSIDE_THE_GANG: Final = frozenset({Role.EVALUATOR})
RUNNING: Final = (PodState.RUNNING, PodState.READY)
# Restarts keep the gang off at most this many nodes (a slow rank's, a broken GPUDirect daemon's): past that
# the slowness is more likely the job's own (its data, its model split) than the nodes', and ever fewer
# nodes are left to schedule on.
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
    REQUEUED = "Requeued"
    """Kueue took the admission back for its own reasons, not a preemption: waitForPodsReady's timeout, a
    ClusterQueue or LocalQueue stopped with HoldAndDrain, the Workload deactivated. Kueue bounds these
    itself (its requeuingStrategy), so they spend no budget of the job's."""
    WORKLOAD_FINISHED = "WorkloadFinished"
    """The job's Kueue Workload was marked Finished while the job had not ended: Kueue never admits it
    again (its jobframework does so when a job cannot start: FailedToStart)."""


class Charge(StrEnum):
    """The counter of status.restarts that a gang restart is charged to (the counter's field name)."""

    FAILURES = "failures"
    PREEMPTIONS = "preemptions"
    HANGS = "hangs"
    SLOW_RANKS = "slow_ranks"
    REQUEUES = "requeues"


RESTART_CHARGES: Final[Mapping[Reason, Charge | None]] = MappingProxyType(
    {
        Reason.POD_FAILED: Charge.FAILURES,
        Reason.PREEMPTED: Charge.PREEMPTIONS,
        Reason.PROGRESS_DEADLINE_EXCEEDED: Charge.HANGS,
        Reason.SLOW_RANK: Charge.SLOW_RANKS,
        Reason.REQUEUED: Charge.REQUEUES,
        Reason.RANK_ZERO_SUCCEEDED: None,
        Reason.ALL_WORKERS_SUCCEEDED: None,
        Reason.BACKOFF_LIMIT_EXCEEDED: None,
        Reason.MAX_PREEMPTIONS_EXCEEDED: None,
        Reason.DEADLINE_EXCEEDED: None,
        Reason.SCHEDULING_TIMEOUT: None,
        Reason.SUSPENDED: None,
        Reason.FINISHED: None,
        Reason.TTL_EXPIRED: None,
        Reason.WAITING_FOR_PREVIOUS_ATTEMPT: None,
        Reason.BACKING_OFF: None,
        Reason.CREATING: None,
        Reason.IN_PROGRESS: None,
        Reason.PREFLIGHT_FAILED: None,
        Reason.SETTLING: None,
        Reason.QUEUED: None,
        Reason.REPEATED_FAILURE: None,
        Reason.MEMBER_REPLACED: None,
        Reason.WORKLOAD_FINISHED: None,
    }
)
"""The counter each reason's gang restart is charged to; None: the reason never restarts the gang (a
Decision that would is refused). Every Reason is a key (tests/unit/test_status.py), so a new reason is
charged by choice, never by default."""


def restart_charge(reason: Reason) -> Charge:
    """The counter a gang restart for `reason` is charged to; ValueError for a reason that charges none."""
    if (charge := RESTART_CHARGES[reason]) is None:
        raise ValueError(f"a gang restart for {reason} is charged to no counter: see RESTART_CHARGES")
    return charge


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

    def __post_init__(self) -> None:
        if self.action == Action.RESTART_GANG:
            restart_charge(self.reason)  # refused here, where it is made, not in the status it would miscount


@dataclass(frozen=True)
class Due:
    """A rule's "nothing yet": the check it makes is due again in this many seconds (a deadline, a
    backoff, a clock that runs)."""

    seconds: float


@dataclass(frozen=True)
class Facts:
    """What one pass reads, the one value its steps take whole (decide, then status_of_pass and
    next_status): the parsed spec, the stored status, the gang of the current attempt, its children as
    observed, the time, where Kueue and the trainers' reports stand, and the spec's generation. What several
    steps derive from them is derived once (the properties)."""

    spec: DistributedTrainingJobSpec
    status: JobStatus
    gang: Gang
    observed: Observed
    now: datetime
    queueing: Queueing | None = None
    """Where Kueue stands with the job's Workload, for a job in a Kueue queue."""
    ledger: Ledger | None = None
    """The trainers' latest progress reports."""
    slow: tuple[SlowRank, ...] | None = None
    """The slow ranks they show (progress.slow_ranks, judged once a pass)."""
    generation: int | None = None
    """The job's metadata.generation: the spec the status observed (conditions' observedGeneration)."""

    @property
    def policy(self) -> RunPolicy:
        return self.spec.run_policy

    @cached_property
    def current(self) -> dict[str, PodView]:
        """The current attempt's pods by member."""
        return {p.member: p for p in self.observed.of_attempt(self.gang.attempt)}

    @cached_property
    def training(self) -> list[Member]:
        """The members whose end breaks (or finishes) the gang."""
        return [m for m in self.gang.members if m.role not in OUTSIDE_THE_GANG]

    @cached_property
    def step(self) -> int | None:
        """The furthest step the attempt reached (the progress reports')."""
        return reached_step(self.ledger, self.status.progress, self.gang.attempt)

    @cached_property
    def all_running(self) -> bool:
        """Every training member has a pod that runs and is not going."""
        current = self.current
        return all(
            m.pod in current and current[m.pod].state in RUNNING and not current[m.pod].terminating
            for m in self.training
        )


Rule = Callable[[Facts], "Decision | Due | None"]
"""A check in the fixed order: a Decision ends the pass; Due, nothing yet but look again then; None, nothing
to say."""


def soonest(timers: Sequence[float]) -> float | None:
    return min(timers) if timers else None
