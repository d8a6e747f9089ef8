"""The spec of a DistributedTrainingJob: what the user asks for (docs/api.md is generated from this).

Pod templates and volume sources stay opaque dicts: the apiserver validates the pods we create from
them, and hand-modelling PodSpec would only drift from Kubernetes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from dtjob.api.identity import MAX_REPLICA_COUNT, MAX_SPARES
from dtjob.api.rules import Rule, WireModel, list_map, reject_duplicates


class Framework(StrEnum):
    """The training framework; it decides how the rendezvous is wired."""

    PYTORCH = "PyTorch"
    TENSORFLOW = "TensorFlow"


class Role(StrEnum):
    """A replica role. PyTorch: Master, Worker. TensorFlow: Chief, Worker, PS, Evaluator."""

    MASTER = "Master"
    WORKER = "Worker"
    CHIEF = "Chief"
    PS = "PS"
    EVALUATOR = "Evaluator"


# The roles of each framework, in rank order: rank 0 is the first pod of the first role present.
FRAMEWORK_ROLES: Final[dict[Framework, tuple[Role, ...]]] = {
    Framework.PYTORCH: (Role.MASTER, Role.WORKER),
    Framework.TENSORFLOW: (Role.CHIEF, Role.WORKER, Role.PS, Role.EVALUATOR),
}
# A job needs one of these to have a rank 0 (the coordinator, or worker 0 when there is none).
RANK_ZERO_ROLES: Final[dict[Framework, tuple[Role, ...]]] = {
    Framework.PYTORCH: (Role.MASTER, Role.WORKER),
    Framework.TENSORFLOW: (Role.CHIEF, Role.WORKER),
}
SINGLETON_ROLES: Final = (Role.MASTER, Role.CHIEF, Role.EVALUATOR)
# Roles that run collectives on GPUs: they get the accelerator and the NCCL wiring. PS and Evaluator
# are CPU-side helpers in TensorFlow's strategies.
GPU_ROLES: Final = frozenset({Role.MASTER, Role.WORKER, Role.CHIEF})


class NcclProfileName(StrEnum):
    """How NCCL reaches other nodes. Auto picks the GPUDirect profile of accelerator.type's machines
    (nvidia-h100-80gb, A3 High -> GPUDirectTCPX; nvidia-h100-mega-80gb, A3 Mega -> GPUDirectTCPXO;
    nvidia-h200-141gb, A3 Ultra, nvidia-b200, A4 and nvidia-gb200, A4X -> RDMA) only when each pod has all
    the machine's GPUs (8; A4X 4), the gang
    has more than one GPU pod and the cluster has the profile's GKE Network objects; else TCP. On RDMA
    machines without the rdma-N Networks, ManagedRDMA where the cluster has GKE's managed DRANET (the
    DeviceClass mrdma.google.com, and nodes of the machine labelled
    cloud.google.com/gke-networking-dra-driver=true): the pods get their GPU NICs through a DRA claim
    instead.
    status.nccl says which and why (docs/gke.md); spec.nccl.networkFallback Never holds the job instead of
    falling back. An explicit GPUDirect profile without its Networks (or, for ManagedRDMA, its DeviceClass)
    is Invalid."""

    AUTO = "Auto"
    TCP = "TCP"
    GPUDIRECT_TCPX = "GPUDirectTCPX"
    GPUDIRECT_TCPXO = "GPUDirectTCPXO"
    RDMA = "RDMA"
    MANAGED_RDMA = "ManagedRDMA"


class NetworkFallback(StrEnum):
    """What Auto does when the cluster lacks what the machines' GPUDirect profile needs (its Network
    objects, GKE's installers, a TCPX(O) daemon known to pair with the installed plugin). TCP: run over
    TCP, with a Warning saying what is missing (NCCL 10-100x slower). Never: do not start; the job is
    Invalid, saying what is missing, until the cluster has it (looked for again every 30 s). A gang that
    GPUDirect would not help (pods with part of a machine's GPUs, one GPU pod) runs over TCP either way."""

    TCP = "TCP"
    NEVER = "Never"


class NcclDebug(StrEnum):
    """NCCL_DEBUG: how much NCCL logs."""

    VERSION = "VERSION"
    WARN = "WARN"
    INFO = "INFO"
    TRACE = "TRACE"


class RestartPolicy(StrEnum):
    """What a failed pod does to the gang. OnFailure: restart the whole gang (up to backoffLimit).
    ExitCode: restart on exit codes >= 128 (signals, and the trainer's "preempted, checkpoint saved"
    code), fail on 1-127. Never: any failure fails the job. Preemptions always restart the gang (up to
    maxPreemptions)."""

    ON_FAILURE = "OnFailure"
    EXIT_CODE = "ExitCode"
    NEVER = "Never"


# The trainer runtime's exit code for "stopped on SIGTERM after a checkpoint of the last step became
# durable" (PREEMPTED_CHECKPOINT_SAVED in trainer-images/runtime/src/dtjob_trainer/exit_codes.py).
# Mirrored, not imported: the operator does not depend on the trainer package; a unit test checks that
# both agree. It is >= 128 on purpose, so ExitCode policies that do not know it still retry it.
TRAINER_CHECKPOINT_SAVED_EXIT_CODE: Final = 200


class RestartStrategy(StrEnum):
    """How a gang restart after a preemption or a retryable failure comes back (docs/fault-tolerance.md).
    Recreate: every pod is deleted and created again. InPlace: the pods still running stay, and the
    trainer runtime in each trains the next attempt in the same process (dtjob_trainer's
    `train_in_rounds`); only the members that are gone get new pods."""

    RECREATE = "Recreate"
    IN_PLACE = "InPlace"


class CleanPodPolicy(StrEnum):
    """Which pods are deleted when the job finishes: Running (those not finished), All, or None."""

    RUNNING = "Running"
    ALL = "All"
    NONE = "None"


class SuccessPolicy(StrEnum):
    """When the job has succeeded. RankZero: the rank-0 pod (Master, Chief, else Worker 0) succeeded.
    AllWorkers: every Worker pod succeeded."""

    RANK_ZERO = "RankZero"
    ALL_WORKERS = "AllWorkers"


def _has_containers(template: dict[str, Any]) -> bool:
    spec = template.get("spec")
    return isinstance(spec, dict) and isinstance(spec.get("containers"), list) and bool(spec["containers"])


_OPAQUE: Final[dict[str, Any]] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
TEMPLATE_HAS_CONTAINERS: Final = Rule(
    cel="has(self.spec) && has(self.spec.containers) && self.spec.containers.size() > 0",
    message="spec.replicas[].template.spec.containers must list at least one container",
)


def _require_containers(template: dict[str, Any]) -> dict[str, Any]:
    if not _has_containers(template):
        raise ValueError(TEMPLATE_HAS_CONTAINERS.message)
    return template


# A PodTemplateSpec, opaque except for `spec.containers`, which is declared so that CEL can see it.
PodTemplate = Annotated[
    dict[str, Any],
    AfterValidator(_require_containers),
    WithJsonSchema(
        {
            **_OPAQUE,
            "description": "A PodTemplateSpec (metadata and spec) for this role's pods. The container named "
            '"trainer" (else the first one) receives the rendezvous environment, ports and mounts.',
            "properties": {
                "spec": {
                    **_OPAQUE,
                    "properties": {"containers": {"type": "array", "items": _OPAQUE}},
                }
            },
            "x-kubernetes-validations": [TEMPLATE_HAS_CONTAINERS.as_validation()],
        }
    ),
]
# A core/v1 VolumeSource (persistentVolumeClaim, csi for GCS FUSE, hostPath, ...), kept opaque.
VolumeSource = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            **_OPAQUE,
            "description": "A VolumeSource (e.g. persistentVolumeClaim for Filestore, csi for GCS FUSE, "
            "hostPath in tests), mounted at checkpoint.path in every pod.",
        }
    ),
]
EnvName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")]
Quantity = Annotated[
    str, Field(max_length=64, pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
]
Port = Annotated[int, Field(ge=1, le=65535)]


class ReplicaSpec(WireModel):
    """One role of the gang: how many pods, and the template they are made from."""

    role: Role
    """The role; a role appears at most once in spec.replicas."""
    count: Annotated[int, Field(ge=1, le=MAX_REPLICA_COUNT)] = 1
    """Number of pods of this role (1 for Master, Chief and Evaluator)."""
    spares: Annotated[int, Field(ge=0, le=MAX_SPARES)] = 0
    """Hot spares (runPolicy.restartStrategy InPlace): pods of this role started ahead, imports done,
    waiting outside the gang. When a member of the role is lost, a spare takes its rank at once and a new
    spare is started behind it."""
    template: PodTemplate

    rules = (
        Rule(
            cel="!(self.role in ['Master', 'Chief', 'Evaluator']) || !has(self.count) || self.count == 1",
            message="spec.replicas[].count must be 1 for the Master, Chief and Evaluator roles",
            holds=lambda r: r.role not in SINGLETON_ROLES or r.count == 1,
        ),
    )


class Accelerator(WireModel):
    """GKE GPU wiring for the GPU roles (Master, Worker, Chief)."""

    type: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    """GPU model as GKE labels nodes (cloud.google.com/gke-accelerator), e.g. nvidia-h100-80gb, nvidia-l4."""
    count: Annotated[int, Field(ge=1, le=16)] = 1
    """GPUs per pod (nvidia.com/gpu requests and limits); also torchrun's processes per pod under nprocPerNode auto."""
    spot: bool = False
    """Run on Spot VMs: select and tolerate cloud.google.com/gke-spot nodes. Preemptions are expected and
    restart the gang without charging backoffLimit."""
    flex_start: bool = False
    """Run on flex-start VMs (GKE's Dynamic Workload Scheduler without queued provisioning): select
    cloud.google.com/gke-flex-start nodes and tolerate that key's optional taint. A node that reaches its
    pool's maximum run duration (7 days unless set) is lost to the gang as a reclaimed one is: an
    interruption, not a failure. Not with spot: a VM has one provisioning model."""
    placement_group: (
        Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] | None
    ) = None
    """GKE compact placement: the GPU pods select nodes of this placement group
    (cloud.google.com/gke-placement-group), so the gang's VMs sit close together in one zone and all-reduce
    crosses fewer network hops. Opt-in; see docs/gke.md for the node pools it needs."""

    rules = (
        Rule(
            cel="!(has(self.spot) && self.spot && has(self.flexStart) && self.flexStart)",
            message="spec.accelerator: spot and flexStart cannot both be true (a VM has one provisioning model)",
            holds=lambda a: not (a.spot and a.flex_start),
        ),
    )


class Elastic(WireModel):
    """torchrun's elastic mode: a c10d rendezvous hosted by Worker 0's torchrun, which the gang's pods join
    and leave while training goes on (docs/frameworks.md#elastic-pytorch). A Worker preempted or deleted
    is replaced on its own while the others train on, as long as minReplicas of them run; losing Worker 0
    (the rendezvous host), a member that failed, or falling below minReplicas restarts the gang from its
    checkpoint as usual. The pods must start the script with torchrun."""

    min_replicas: Annotated[int, Field(ge=1, le=MAX_REPLICA_COUNT)]
    """The fewest pods the gang trains on (PET_NNODES' lower bound); at most the Worker count."""
    max_replicas: Annotated[int, Field(ge=1, le=MAX_REPLICA_COUNT)] | None = None
    """PET_NNODES' upper bound; at least the Worker count, which it defaults to."""
    max_restarts: Annotated[int, Field(ge=0, le=1000)] = 10
    """PET_MAX_RESTARTS: how often each pod's torchrun restarts its workers after they failed (a lost
    member breaks every rank's collectives, so each loss costs every pod one) before the pod fails."""


class Torch(WireModel):
    """PyTorch rendezvous settings."""

    port: Port = 29500
    """MASTER_PORT: the c10d TCPStore port on the rank-0 pod."""
    nproc_per_node: int | str = "auto"
    """PET_NPROC_PER_NODE, torchrun's processes per pod: an integer, or auto: accelerator.count (1 without an
    accelerator)."""
    elastic: Elastic | None = None
    """Elastic training under torchrun (PyTorch, Worker replicas only). Unset: a gang of fixed size, whose
    every lost member restarts it whole."""

    rules = (
        Rule(
            cel="!has(self.nprocPerNode) || (type(self.nprocPerNode) == int ? "
            "(self.nprocPerNode >= 1 && self.nprocPerNode <= 128) : self.nprocPerNode == 'auto')",
            message="spec.torch.nprocPerNode must be auto or an integer from 1 to 128",
            holds=lambda t: (
                t.nproc_per_node == "auto" or (type(t.nproc_per_node) is int and 1 <= t.nproc_per_node <= 128)
            ),
        ),
    )


class TensorFlow(WireModel):
    """TensorFlow cluster settings."""

    port: Port = 2222
    """The gRPC port of every task in TF_CONFIG."""


class EnvVar(WireModel):
    """One environment variable."""

    name: EnvName
    value: Annotated[str, Field(max_length=4096)] = ""


class Preflight(WireModel):
    """An all-reduce sweep every pod runs before training (init container dtj-preflight), proving the
    gang's collective path: its figures go to status.preflight; below the floor, or NCCL fallen back to
    TCP sockets under a GPUDirect profile, the job fails with PreflightFailed. PyTorch jobs; the image
    needs the dtjob trainer runtime (python -m dtjob_trainer.preflight), as dtjob's trainer images have."""

    enabled: bool = False
    # Spelled GBps on the wire: the unit is gigabytes per second, and to_camel would write "Gbps" (gigabits).
    min_bus_bandwidth_gbps: Annotated[float, Field(ge=0.001, le=100000)] | None = Field(
        default=None, alias="minBusBandwidthGBps"
    )
    """The floor for all-reduce busbw at the largest size, in GB/s (10^9 bytes/s, as nccl-tests prints
    it). Unset: the network profile's default (none for TCP)."""
    budget_seconds: Annotated[int, Field(ge=1, le=600)] = 30
    """How long the sweep may take, after the rendezvous: larger sizes that would not fit are skipped."""


class Nccl(WireModel):
    """NCCL wiring of the GPU roles."""

    profile: NcclProfileName = NcclProfileName.AUTO
    """Network profile: the env, pod annotations, host paths and sidecar NCCL needs on this machine family."""
    debug: NcclDebug = NcclDebug.WARN
    """NCCL_DEBUG."""
    env: list[EnvVar] = Field(default_factory=list, max_length=64, json_schema_extra=list_map("name"))
    """Extra variables for the trainer container; they win over the profile's defaults of the same name."""
    preflight: Preflight = Preflight()
    network_fallback: NetworkFallback = NetworkFallback.TCP
    """Under profile Auto: TCP where the cluster lacks what GPUDirect needs (a Warning says what), or Never
    (the job waits, Invalid, until the cluster has it). An explicit profile never falls back."""
    daemon_image: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    """The image of the GPUDirect receive-datapath daemon (tcpx-daemon, tcpxo-daemon), taken as set.
    Unset: the operator's, else the pair of the NCCL plugin version the cluster's nccl-tcpx(o)-installer
    put on the nodes (docs/gke.md); status.nccl.daemonImage says which the attempt runs."""

    @model_validator(mode="after")
    def _unique_names(self) -> Nccl:
        reject_duplicates("spec.nccl.env", [e.name for e in self.env])
        return self


class SharedMemory(WireModel):
    """/dev/shm as a memory-backed emptyDir: NCCL and DataLoader workers need more than the 64 MiB default."""

    enabled: bool = True
    """Mount /dev/shm (unless the template already mounts something there)."""
    size_limit: Quantity | None = None
    """emptyDir sizeLimit, e.g. 16Gi. It counts against the pod's memory; unset means the node's default
    (up to half the node's memory)."""


class Checkpoint(WireModel):
    """Where checkpoints live, so a restarted gang resumes from the last one."""

    path: Annotated[str, Field(min_length=1, max_length=1024, pattern=r"^/")] = "/checkpoints"
    """Mount path in every pod; exported as DTJ_CHECKPOINT_DIR and AIP_CHECKPOINT_DIR."""
    volume: VolumeSource | None = None


class Output(WireModel):
    """Where the trainer writes its results (a path or a gs:// URI), as Vertex AI scripts expect."""

    model_dir: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    """Exported as AIP_MODEL_DIR."""
    tensorboard_dir: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    """Exported as AIP_TENSORBOARD_LOG_DIR."""


class RunPolicy(WireModel):
    """Gang restarts, deadlines, cleanup and suspension."""

    restart_policy: RestartPolicy = RestartPolicy.ON_FAILURE
    restart_strategy: RestartStrategy = RestartStrategy.RECREATE
    """InPlace keeps the running members' pods through a restart after a preemption or a retryable
    failure; their trainers must train in rounds (dtjob_trainer's `train_in_rounds`). A lost node, a hang
    or a slow rank still recreate the whole gang."""
    backoff_limit: Annotated[int, Field(ge=0, le=1000)] = 3
    """Gang restarts after failures before the job fails. Preemptions are not charged here."""
    stop_on_repeated_failure: bool = True
    """Fail the job (RepeatedFailure) when two attempts in a row failed the same way: the same error line
    from the same place in the code, the same exit code, at about the same step. A third attempt would
    only burn the gang's GPU hours failing again. false: spend the whole backoffLimit."""
    max_preemptions: Annotated[int, Field(ge=0, le=10000)] = 50
    """Gang restarts after preemptions before the job fails."""
    active_deadline_seconds: Annotated[int, Field(ge=1)] | None = None
    """The job fails (DeadlineExceeded) and its pods are deleted this long after status.startTime."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] | None = None
    """The job is deleted this long after it finished."""
    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.RUNNING
    success_policy: SuccessPolicy = SuccessPolicy.RANK_ZERO
    suspend: bool = False
    """Delete the pods and keep the job; setting it back to false recreates them (a new start time)."""
    scheduling_timeout_seconds: Annotated[int, Field(ge=1)] | None = None
    """The job fails (SchedulingTimeout) when a pod has stayed unscheduled this long."""
    failure_settle_seconds: Annotated[int, Field(ge=0, le=600)] = 30
    """How long a gang that lost a member with no disruption in sight is watched before the restart is
    charged to backoffLimit: a preemption seen meanwhile (often after the peers crashed) makes it one."""
    progress_deadline_seconds: Annotated[int, Field(ge=30, le=86400)] | None = None
    """A gang whose step has not advanced this long while every member runs is taken for hung and
    restarted from its checkpoint (ProgressDeadlineExceeded). Judged on the trainers' progress reports
    (docs/progress.md), from the first step on: the start-up before it and time in a checkpoint save do
    not count. Unset: no hang detection."""
    max_hang_restarts: Annotated[int, Field(ge=0, le=1000)] = 3
    """Gang restarts after progressDeadlineSeconds ran out before the job fails (its own budget)."""
    slow_rank_restart_seconds: Annotated[int, Field(ge=60, le=86400)] | None = None
    """Opt-in: a gang whose SlowRank condition has stayed True this long, while every member runs, is
    restarted from its checkpoint with the slow rank's node avoided (status.avoidedNodes; at most 3 nodes,
    after which the condition only reports). Charged to no budget. Unset: SlowRank only reports."""


class NetworkPolicy(WireModel):
    """Network isolation of the gang: a networking.k8s.io/v1 NetworkPolicy named after the job lets only
    the job's own pods reach its pods, on every port (the rendezvous: MASTER_PORT, TF_CONFIG's ports, NCCL's
    sockets, the preflight). It takes effect only where the cluster's network plugin enforces NetworkPolicy
    (GKE: Dataplane V2 or network policy enforcement); a Prometheus scraping rank 0's /metrics needs a
    policy of its own (docs/security.md)."""

    enabled: bool = False
    """Create the policy (the job's deletion takes it along); setting this back to false deletes it."""


def _is(framework: Framework) -> str:
    return f"self.framework == '{framework}'"


def _role_list(roles: tuple[Role, ...]) -> str:
    return "[" + ", ".join(f"'{role}'" for role in roles) + "]"


def _english(roles: tuple[Role, ...]) -> str:
    return ", ".join(roles[:-1]) + f" or {roles[-1]}" if len(roles) > 1 else roles[0]


def _roles_rule(framework: Framework) -> Rule:
    roles = FRAMEWORK_ROLES[framework]
    return Rule(
        cel=f"!({_is(framework)}) || self.replicas.all(r, r.role in {_role_list(roles)})",
        message=f"spec.replicas[].role must be {_english(roles)} for a {framework} job (spec.framework)",
        holds=lambda s: s.framework != framework or all(r.role in roles for r in s.replicas),
    )


def _rank_zero_rule(framework: Framework) -> Rule:
    roles = RANK_ZERO_ROLES[framework]
    return Rule(
        cel=f"!({_is(framework)}) || self.replicas.exists(r, r.role in {_role_list(roles)})",
        message=f"spec.replicas[].role: a {framework} job needs a {_english(roles)} replica (it holds rank 0; spec.framework)",
        holds=lambda s: s.framework != framework or any(r.role in roles for r in s.replicas),
    )


# TensorFlow's ParameterServerStrategy is driven from the Chief (its coordinator): without one, workers
# and parameter servers start their servers and wait forever.
PS_NEEDS_CHIEF: Final = Rule(
    cel=f"!({_is(Framework.TENSORFLOW)}) || !self.replicas.exists(r, r.role == '{Role.PS}') "
    f"|| self.replicas.exists(r, r.role == '{Role.CHIEF}')",
    message="spec.replicas[].role: a TensorFlow job with PS replicas needs a Chief (ParameterServerStrategy's coordinator)",
    holds=lambda s: (
        s.framework != Framework.TENSORFLOW or Role.PS not in s.roles() or Role.CHIEF in s.roles()
    ),
)


_ELASTIC = "has(self.torch) && has(self.torch.elastic)"
_ONE_PROCESS_A_POD = (
    "(has(self.torch) && has(self.torch.nprocPerNode) && type(self.torch.nprocPerNode) == int) "
    "? self.torch.nprocPerNode == 1 "
    ": (!has(self.accelerator) || !has(self.accelerator.count) || self.accelerator.count == 1)"
)


def one_process_a_pod(spec: DistributedTrainingJobSpec) -> bool:
    """Whether each pod runs one training process (nprocPerNode resolves to 1): no torchrun workers."""
    nproc = spec.torch.nproc_per_node
    if type(nproc) is int:
        return nproc == 1
    return spec.accelerator is None or spec.accelerator.count == 1


def _worker_count(spec: DistributedTrainingJobSpec) -> int:
    return sum(r.count for r in spec.replicas if r.role == Role.WORKER)


# torchrun's c10d rendezvous has no master: every pod is a Worker, and Worker 0's torchrun hosts it.
ELASTIC_RULES: Final = (
    Rule(
        cel=f"!({_ELASTIC}) || ({_is(Framework.PYTORCH)} && self.replicas.all(r, r.role == '{Role.WORKER}'))",
        message="spec.torch.elastic needs spec.framework PyTorch and Worker replicas only (spec.replicas[].role: "
        "torchrun's c10d rendezvous has no Master)",
        holds=lambda s: (
            s.torch.elastic is None
            or (s.framework == Framework.PYTORCH and all(r.role == Role.WORKER for r in s.replicas))
        ),
    ),
    Rule(
        cel=f"!({_ELASTIC}) || self.replicas.all(r, r.role != '{Role.WORKER}' "
        "|| (has(r.count) ? r.count : 1) >= self.torch.elastic.minReplicas)",
        message="spec.torch.elastic.minReplicas must be at most the Worker count (spec.replicas[].count)",
        holds=lambda s: s.torch.elastic is None or s.torch.elastic.min_replicas <= _worker_count(s),
    ),
    Rule(
        cel=f"!({_ELASTIC}) || !has(self.torch.elastic.maxReplicas) || self.replicas.all(r, "
        f"r.role != '{Role.WORKER}' || (has(r.count) ? r.count : 1) <= self.torch.elastic.maxReplicas)",
        message="spec.torch.elastic.maxReplicas must be at least the Worker count (spec.replicas[].count)",
        holds=lambda s: (
            s.torch.elastic is None
            or s.torch.elastic.max_replicas is None
            or s.torch.elastic.max_replicas >= _worker_count(s)
        ),
    ),
    Rule(
        cel=f"!({_ELASTIC}) || !has(self.nccl) || !has(self.nccl.preflight) "
        "|| !has(self.nccl.preflight.enabled) || !self.nccl.preflight.enabled",
        message="spec.nccl.preflight.enabled cannot be combined with spec.torch.elastic (a replaced pod's "
        "preflight would wait for peers that are training already)",
        holds=lambda s: s.torch.elastic is None or not s.nccl.preflight.enabled,
    ),
    Rule(
        cel=f"!({_ELASTIC}) || !has(self.runPolicy) || !has(self.runPolicy.successPolicy) "
        f"|| self.runPolicy.successPolicy == '{SuccessPolicy.RANK_ZERO}'",
        message="spec.runPolicy.successPolicy must be RankZero with spec.torch.elastic (a replacement still "
        "starting when the others finish would never succeed)",
        holds=lambda s: s.torch.elastic is None or s.run_policy.success_policy == SuccessPolicy.RANK_ZERO,
    ),
)


def _unchanged(field: str) -> str:
    return f"(has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field}))"


# Everything rendered into a pod: Kubernetes cannot change a running pod's spec, so these may change
# only while the job is suspended (its pods are gone then, and are recreated from the new spec).
POD_SHAPING_FIELDS: Final = (
    "replicas",
    "torch",
    "tensorflow",
    "nccl",
    "sharedMemory",
    "checkpoint",
    "output",
)
_SUSPENDED = "(has(self.runPolicy) && has(self.runPolicy.suspend) && self.runPolicy.suspend)"
# The gang's shape: the same roles with the same counts. It never changes (a suspended job resumes as the
# same gang; Kueue's Workload was sized for it), so a change of it gets that rule's message alone, not
# the suspend rule's too, which would send the user to suspend for a change that is refused then as well.
_SAME_GANG = (
    "self.replicas.size() == oldSelf.replicas.size() && self.replicas.all(r, "
    "oldSelf.replicas.exists(o, o.role == r.role && "
    "(has(o.count) ? o.count : 1) == (has(r.count) ? r.count : 1)))"
)
GANG_IMMUTABLE: Final = (
    "spec.replicas roles and counts are immutable, even while suspended"
    " (a gang of another size is another job: delete it and create it again)"
)


def _unshaped(field: str) -> str:
    """The suspend rule's test of one field; for spec.replicas, of what may change (the templates)."""
    return f"(!({_SAME_GANG}) || {_unchanged(field)})" if field == "replicas" else _unchanged(field)


class DistributedTrainingJobSpec(WireModel):
    """A gang of pods that trains one model with PyTorch or TensorFlow, restarted as a whole on failure."""

    framework: Framework
    replicas: Annotated[
        list[ReplicaSpec], Field(min_length=1, max_length=4, json_schema_extra=list_map("role"))
    ]
    """The roles of the gang, each at most once."""
    accelerator: Accelerator | None = None
    torch: Torch = Torch()
    tensorflow: TensorFlow = TensorFlow()
    nccl: Nccl = Nccl()
    shared_memory: SharedMemory = SharedMemory()
    checkpoint: Checkpoint = Checkpoint()
    output: Output = Output()
    run_policy: RunPolicy = RunPolicy()
    network_policy: NetworkPolicy = NetworkPolicy()

    rules = (
        *(_roles_rule(framework) for framework in Framework),
        # Only where a framework has roles without rank 0 (with PyTorch, any valid replica holds it).
        *(_rank_zero_rule(f) for f in Framework if set(FRAMEWORK_ROLES[f]) - set(RANK_ZERO_ROLES[f])),
        PS_NEEDS_CHIEF,
        *ELASTIC_RULES,
        Rule(
            cel="!has(self.runPolicy) || !has(self.runPolicy.restartStrategy) "
            f"|| self.runPolicy.restartStrategy != '{RestartStrategy.IN_PLACE}' "
            f"|| ({_is(Framework.PYTORCH)} && !({_ELASTIC}))",
            message="spec.runPolicy.restartStrategy InPlace needs spec.framework PyTorch without "
            "spec.torch.elastic (the trainer runtime's rounds rebuild a torch.distributed process group)",
            holds=lambda s: (
                s.run_policy.restart_strategy != RestartStrategy.IN_PLACE
                or (s.framework == Framework.PYTORCH and s.torch.elastic is None)
            ),
        ),
        Rule(
            cel="self.replicas.all(r, !has(r.spares) || r.spares == 0) || (has(self.runPolicy) "
            f"&& has(self.runPolicy.restartStrategy) && self.runPolicy.restartStrategy == '{RestartStrategy.IN_PLACE}' "
            f"&& ({_ONE_PROCESS_A_POD}))",
            message="spec.replicas[].spares needs spec.runPolicy.restartStrategy InPlace and one process a "
            "pod (spec.torch.nprocPerNode 1, or auto with at most 1 GPU a pod): a spare learns its rank "
            "from a file when it takes one, which torchrun's workers cannot",
            holds=lambda s: (
                all(r.spares == 0 for r in s.replicas)
                or (s.run_policy.restart_strategy == RestartStrategy.IN_PLACE and one_process_a_pod(s))
            ),
        ),
        Rule(
            cel=f"{_is(Framework.PYTORCH)} || !has(self.nccl) || !has(self.nccl.preflight) "
            "|| !has(self.nccl.preflight.enabled) || !self.nccl.preflight.enabled",
            message="spec.nccl.preflight.enabled needs framework PyTorch (the sweep runs torch.distributed)",
            holds=lambda s: s.framework == Framework.PYTORCH or not s.nccl.preflight.enabled,
        ),
        Rule(
            cel="!has(self.nccl) || !has(self.nccl.profile) || self.nccl.profile in ['Auto', 'TCP'] "
            "|| has(self.accelerator)",
            message="spec.nccl.profile GPUDirectTCPX, GPUDirectTCPXO, RDMA and ManagedRDMA need spec.accelerator",
            holds=lambda s: (
                s.nccl.profile in (NcclProfileName.AUTO, NcclProfileName.TCP) or s.accelerator is not None
            ),
        ),
        Rule(cel="self.framework == oldSelf.framework", message="spec.framework is immutable"),
        Rule(cel=_SAME_GANG, message=GANG_IMMUTABLE),
        Rule(cel=_unchanged("accelerator"), message="spec.accelerator is immutable"),
        Rule(
            cel=f"{_SUSPENDED} || ({' && '.join(_unshaped(f) for f in POD_SHAPING_FIELDS)})",
            message="spec."
            + ", spec.".join(POD_SHAPING_FIELDS)
            + " can change only while spec.runPolicy.suspend is true (running pods cannot change)",
        ),
    )

    @model_validator(mode="after")
    def _unique_roles(self) -> DistributedTrainingJobSpec:
        reject_duplicates("spec.replicas", [r.role for r in self.replicas])
        return self

    def roles(self) -> tuple[Role, ...]:
        """The roles present, in rank order."""
        present = {r.role for r in self.replicas}
        return tuple(role for role in FRAMEWORK_ROLES[self.framework] if role in present)

    def replica(self, role: Role) -> ReplicaSpec:
        return next(r for r in self.replicas if r.role == role)
