"""The status of a DistributedTrainingJob: what the operator observed and decided (written only by it)."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from dtjob.api.rules import WireModel
from dtjob.api.spec import NcclProfileName, Role


class Phase(StrEnum):
    """A one-word summary of the conditions, for `kubectl get`."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    INVALID = "Invalid"
    QUEUED = "Queued"
    """Waiting for Kueue to admit the whole gang: no pod exists."""


class StatusModel(WireModel):
    # A status written by a newer operator version may carry fields this one does not know: keep reading it.
    model_config = ConfigDict(extra="ignore")


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    INVALID = "Invalid"
    UNSCHEDULABLE = "Unschedulable"
    """A pod of the current attempt cannot be placed: the message is the scheduler's."""
    CHECKPOINT_NOT_SHARED = "CheckpointNotShared"
    """The gang has several pods and no checkpoint volume: a restarted gang cannot resume."""
    QUEUED = "Queued"
    """The job waits in a Kueue queue; the message names the ClusterQueue and says what Kueue waits for."""
    ADMITTED = "Admitted"
    """Kueue admitted the whole gang (quota reserved, admission checks ready): its pods may exist."""
    SLOW_RANK = "SlowRank"
    """A rank's own work a step (before it waits on its peers) stays well above the rest of the gang's:
    the whole gang trains at its pace. The message names the pod and its node (docs/progress.md)."""


# RFC 3339 with seconds, as metav1.Time serializes.
Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def precise_timestamp(moment: datetime) -> str:
    """RFC 3339 with milliseconds: for moments whose differences are a restart's phases."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Condition(StatusModel):
    """A metav1.Condition."""

    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[
        str, Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    ]
    message: Annotated[str, Field(max_length=32768)] = ""
    last_transition_time: Timestamp
    observed_generation: Annotated[int, Field(ge=0)] | None = None


class ReplicaStatus(StatusModel):
    """Pods of one role in the current attempt."""

    role: Role
    active: int = 0
    """Pods pending or running."""
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    """Pods that failed or were preempted."""
    # Written only for a role with hot spares (spec.replicas[].spares).
    spares: int = Field(default=0, exclude_if=lambda count: count == 0)
    """Hot spares pending or running, outside the gang."""
    spares_running: int = Field(default=0, exclude_if=lambda count: count == 0)
    """Hot spares whose trainer runs: each can take a lost member's rank at once."""


class Restarts(StatusModel):
    """Gang restarts so far, by cause, and the attempts the platform failed."""

    failures: int = 0
    """Charged to runPolicy.backoffLimit."""
    preemptions: int = 0
    """Charged to runPolicy.maxPreemptions."""
    # Written only once it counts something, as preflightFailures.
    hangs: int = Field(default=0, exclude_if=lambda count: count == 0)
    """Charged to runPolicy.maxHangRestarts: restarts after progressDeadlineSeconds ran out."""
    slow_ranks: int = Field(default=0, exclude_if=lambda count: count == 0)
    """Restarts that moved the gang off a slow rank's node (runPolicy.slowRankRestartSeconds)."""
    requeues: int = Field(default=0, exclude_if=lambda count: count == 0)
    """Restarts after Kueue evicted the gang for its own reasons (waitForPodsReady's timeout, a stopped
    queue, the Workload deactivated): Kueue bounds these itself, so they are charged to no budget."""
    total: int = 0
    """failures + preemptions + hangs + slowRanks + requeues (a printer column)."""
    # Written only once it counts something: only elastic jobs replace members.
    replacements: int = Field(default=0, exclude_if=lambda count: count == 0)
    """Members of an elastic gang (spec.torch.elastic) replaced one by one while the others trained on:
    no gang restart, so not in total, and charged to no budget."""
    # Written only once it counts something: the preflight is opt-in, and a 0 on every job would be noise.
    preflight_failures: int = Field(default=0, exclude_if=lambda count: count == 0)
    """Attempts whose NCCL preflight failed (spec.nccl.preflight): a failure of the platform, not of the
    training code, so charged to no budget and not in total (the job fails instead of restarting)."""


class FailureSignature(StatusModel):
    """One way members of an attempt failed, as their termination messages say (dtjob.failures)."""

    reason: str
    """The container's (Error, OOMKilled) or the pod's reason."""
    exit_code: int | None = None
    error: Annotated[str, Field(max_length=256)] = ""
    """The error line: a Python traceback's last exception line, else the message's last line."""
    where: str | None = None
    """Where it was raised: the traceback's innermost frame, file:line."""


class LastRestart(StatusModel):
    """Why and when the gang was last restarted."""

    reason: str
    message: str = ""
    time: Timestamp
    step: int | None = None
    """The step training had reached (the progress reports' latest) when the gang broke."""
    in_place: bool | None = None
    """True when the members still running keep their pods and train the next attempt in place
    (runPolicy.restartStrategy InPlace); unset when the whole gang is recreated."""
    # Written only after a failure: the next attempt failing the same way ends the job (RepeatedFailure).
    failures: Annotated[list[FailureSignature], Field(max_length=4)] = Field(
        default_factory=list, exclude_if=lambda failures: not failures
    )
    """For a failure restart (PodFailed), the distinct ways the members failed, the first to end first."""


class PreflightResult(StatusModel):
    """What the NCCL preflight measured before the attempt trained (spec.nccl.preflight)."""

    attempt: int
    passed: bool
    message: str = ""
    bus_bandwidth_gbps: float | None = None
    """All-reduce busbw at the largest size, GB/s (nccl-tests' busbw = algbw x 2(n-1)/n)."""
    alg_bandwidth_gbps: float | None = None
    size_bytes: int | None = None
    transport: str | None = None
    """The network NCCL used (Socket, or a GPUDirect plugin: GPUDirectTCPX, FasTrak, gIB); gloo on CPU."""
    backend: str | None = None
    world_size: int | None = None
    seconds: float | None = None
    """From the start of the preflight to its verdict, the rendezvous included."""


class NcclChoice(StatusModel):
    """The network profile the attempt's GPU pods got, and why (spec.nccl.profile Auto, or a GPUDirect one)."""

    attempt: int
    profile: NcclProfileName
    reason: str = ""
    autopilot: bool | None = None
    """True when the pods take the shape of GKE's Autopilot recipes (the cluster's GPUDirect installers
    run in Autopilot's namespaces; docs/gke.md)."""
    daemon_image: str | None = None
    """The GPUDirect TCPX(O) daemon image the attempt's pods run: spec.nccl.daemonImage or the operator's
    when set, else the pair of the NCCL plugin the cluster's installer installs (docs/gke.md)."""


class Progress(StatusModel):
    """Training progress of the current attempt, as its trainers report it (docs/progress.md)."""

    attempt: int
    step: int
    """Optimizer steps completed (rank 0's count)."""
    total_steps: int | None = None
    percent: float | None = None
    """step / totalSteps, in percent (one decimal), when the trainer says how many steps there are."""
    epoch: int | None = None
    loss: float | None = None
    samples_per_second: float | None = None
    """All ranks together, over the last steps."""
    step_seconds: float | None = None
    """Wall-clock seconds a step takes lately (rank 0), checkpoint saves included."""
    last_checkpoint_step: int | None = None
    eta: Timestamp | None = None
    """When training should end at the attempt's pace so far: (totalSteps - step) x the average time a
    step took since the first step was reported, from updatedAt (stepSeconds until two steps are seen)."""
    updated_at: Timestamp
    """When the step last advanced (or the first report came)."""


class Replacement(StatusModel):
    """A member of an elastic gang replaced while the others trained on."""

    pod: str
    uid: str = ""
    """The replaced pod's uid; empty when it was gone before its end was seen."""
    reason: str
    """Why it went: Preempted, or Lost (deleted, or gone with no word)."""
    message: str = ""
    """How it ended, and how many members train on (the MemberReplaced Event's text)."""
    time: Timestamp
    """When the operator saw it go."""


class ElasticStatus(StatusModel):
    """The mode of an elastic job (spec.torch.elastic): torchrun's bounds, and the members replaced in
    the current attempt (the latest of each member)."""

    min_replicas: int
    """PET_NNODES' lower bound: fewer members running restart the gang."""
    max_replicas: int
    """PET_NNODES' upper bound (spec.torch.elastic.maxReplicas, else the Worker count)."""
    replaced: list[Replacement] = Field(default_factory=list, exclude_if=lambda replaced: not replaced)
    """The latest replacement of each member in this attempt; a new attempt starts with none."""


class RestartCost(StatusModel):
    """The wall time one gang restart cost, phase by phase (docs/fault-tolerance.md#goodput). Each phase's
    seconds are written once the phase ended; without progress reports the restore is never seen ended."""

    attempt: int
    """The attempt the restart started."""
    reason: str
    detection_seconds: float | None = None
    """From the first member's end (its container's finishedAt) to the operator's restart."""
    teardown_seconds: float | None = None
    """From the restart to every pod of the new attempt created (the old ones gone first)."""
    start_seconds: float | None = None
    """From created to every member running: scheduling, image, container start."""
    restore_seconds: float | None = None
    """From running to the new attempt's first reported step: imports, rendezvous, checkpoint load."""
    lost_work_seconds: float | None = None
    """Training after the last checkpoint, which the new attempt does again: the steps past it times the
    step time (unknown without progress reports); 0 once the new attempt reports that it resumed from
    the step the ended one stopped at (the ranks saved it on SIGTERM)."""
    stopped_at_step: int | None = None
    """The ended attempt's step, as last reported when the restart began."""
    resumed_from_step: int | None = None
    """The checkpoint step the new attempt resumed from (lastCheckpointStep in its first report)."""
    total_seconds: float | None = None
    """All of the above, once the restore ended."""
    restarted_at: Timestamp
    created_at: Timestamp | None = None
    running_at: Timestamp | None = None


class Goodput(StatusModel):
    """How much of the job's wall time trained (docs/fault-tolerance.md#goodput), from its progress
    reports; as of the latest report (or the job's end), so that it changes only when they do."""

    since: Timestamp
    """When the job's pods were first created."""
    as_of: Timestamp
    productive_seconds: float = 0.0
    """Time in which the reported step advanced, less the work restarts made the gang do again."""
    wall_seconds: float = 0.0
    percent: float | None = None
    """productiveSeconds / wallSeconds, in percent."""
    restart_seconds: float = 0.0
    """All restarts' totals together."""
    last_restart: RestartCost | None = None


class JobStatus(StatusModel):
    """Observed state of the job."""

    phase: Phase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    replica_statuses: list[ReplicaStatus] = Field(default_factory=list)
    replicas_ready: str | None = None
    """Ready pods of the current attempt over all pods, e.g. 3/4 (a printer column)."""
    attempt: Annotated[int, Field(ge=1)] = 1
    """The restart generation: every gang restart, and every suspension, moves the gang to attempt + 1."""
    created_attempt: Annotated[int, Field(ge=1)] | None = None
    """The latest attempt whose pods were all created: a pod of it that goes missing later was lost, and
    restarts the gang instead of being recreated into a rendezvous that cannot re-form."""
    restarts: Restarts = Restarts()
    last_restart: LastRestart | None = None
    preflight: PreflightResult | None = None
    nccl: NcclChoice | None = None
    progress: Progress | None = None
    elastic: ElasticStatus | None = None
    """Present for an elastic job only: it says the gang trains on while members are replaced."""
    avoided_nodes: list[str] = Field(default_factory=list, exclude_if=lambda nodes: not nodes)
    """Nodes the gang's pods are kept off, each once the home of a rank slow for
    runPolicy.slowRankRestartSeconds or of a GPUDirect daemon that never became ready, in the order they
    were found."""
    broken_since: Timestamp | None = None
    """When a member of the current attempt was first seen ended with no disruption in sight: the gang is
    watched for runPolicy.failureSettleSeconds from here before a failure is charged."""
    start_time: Timestamp | None = None
    """When the pods were first created (or the job last resumed); activeDeadlineSeconds counts from here."""
    completion_time: Timestamp | None = None
    goodput: Goodput | None = None
    observed_generation: int | None = None

    def condition(self, type_: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def is_true(self, type_: ConditionType) -> bool:
        condition = self.condition(type_)
        return condition is not None and condition.status == "True"

    @property
    def finished(self) -> bool:
        return self.is_true(ConditionType.SUCCEEDED) or self.is_true(ConditionType.FAILED)
