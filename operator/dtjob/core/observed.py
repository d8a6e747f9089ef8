"""What a job's children look like right now: each pod classified, grouped by attempt. Pure.

Classification is an ordered chain of small rules over one pod (first match wins). What a pod's end
means for the gang (a preemption, a failure worth retrying, a permanent one) is decided from this view
and the restart policy in `policy.fault_of`; here a pod is only described as Kubernetes reports it, with
the time-based judgements (a node NotReady too long, an image error that persists, a pod stuck
Terminating) made against `now`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from dtjob.api import Role, parse_timestamp
from dtjob.core.gke import DAEMON_NOT_READY_RESTARTS, DAEMON_SIDECARS
from dtjob.core.names import (
    ATTEMPT_LABEL,
    JOB_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    ROLE_LABEL,
    SPARE_LABEL,
    TRAINER_CONTAINER,
    named_as_spare,
    pod_name,
)
from dtjob.core.preflight import PREFLIGHT_CONTAINER, result_of


class PodState(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    READY = "Ready"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    LOST = "Lost"
    """Deleted (or gone) before it ended, with nothing on the pod saying why."""
    UNKNOWN = "Unknown"


ACTIVE_STATES: Final = frozenset({PodState.PENDING, PodState.RUNNING, PodState.READY, PodState.UNKNOWN})
ENDED_ABNORMALLY: Final = frozenset({PodState.FAILED, PodState.PREEMPTED, PodState.LOST})

# DisruptionTarget reasons: Kubernetes took the pod away; the training code did nothing wrong.
DISRUPTION_REASONS: Final = frozenset(
    {
        "TerminationByKubelet",
        "PreemptionByScheduler",
        "DeletionByTaintManager",
        "EvictionByEvictionAPI",
        "DeletionByPodGC",
    }
)
# status.reason of pods the kubelet ended: graceful node shutdown (Terminated; Shutdown before 1.22),
# rejected while the node shuts down (NodeShutdown), node-pressure eviction (Evicted).
DISRUPTED_POD_REASONS: Final = frozenset({"Terminated", "Shutdown", "NodeShutdown", "Evicted"})
# What the kubelet's Ready condition says while its graceful node shutdown runs (pkg/kubelet/nodeshutdown,
# v1.34.4: ShutdownStatus).
KUBELET_SHUTTING_DOWN: Final = "node is shutting down"
# A node whose kubelet stopped reporting is already NotReady for the node-monitor grace period (40-50 s);
# a collective cannot progress without it, but a network blip should not cost a restart: a minute more.
NODE_NOT_READY_GRACE: Final = timedelta(seconds=60)
# Image errors the kubelet retries (a registry hiccup clears within its first back-offs) count once they
# have lasted this long since the pod was scheduled; the others never clear and count at once.
IMAGE_PULL_GRACE: Final = timedelta(seconds=120)
RETRIED_IMAGE_ERRORS: Final = frozenset({"ErrImagePull", "ImagePullBackOff"})
FINAL_IMAGE_ERRORS: Final = frozenset({"InvalidImageName", "ErrImageNeverPull"})
IMAGE_ERRORS: Final = RETRIED_IMAGE_ERRORS | FINAL_IMAGE_ERRORS
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
NEVER: Final = datetime.min.replace(tzinfo=UTC)
# Node taints that say the node is going away: GKE's ahead of a Spot/maintenance termination, the node
# lifecycle controller's, the out-of-service taint of a node shut down for good, the cluster autoscaler's.
DISRUPTION_TAINTS: Final = frozenset(
    {
        "cloud.google.com/impending-node-termination",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/out-of-service",
        "ToBeDeletedByClusterAutoscaler",
    }
)
# The trainer runtime's termination message reason for "stopped on SIGTERM, checkpoint saved" (torchrun
# exits 1 after its workers wrote it and exited 200; see docs/trainer-runtime.md).
PREEMPTED_CHECKPOINT_SAVED: Final = "PreemptedCheckpointSaved"
# The reason of a pod whose GPUDirect daemon sidecar never became ready on its node.
DAEMON_NOT_READY: Final = "DaemonNotReady"


@dataclass(frozen=True)
class PodView:
    name: str
    uid: str
    role: Role | None
    index: int | None
    attempt: int | None
    state: PodState
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    node: str | None = None
    created: datetime | None = None
    ended_at: datetime | None = None
    """When the trainer container terminated (its finishedAt): the first member to end is the root cause."""
    terminating: bool = False
    unschedulable: bool = False
    """The scheduler reported it cannot place the pod (PodScheduled=False, Unschedulable)."""
    stuck: bool = False
    """Terminating past its grace period on a lost node: no kubelet will ever finish it (force-delete)."""
    recheck_at: datetime | None = None
    """When time alone may change this view (a grace running out); None when nothing is pending."""
    preflight: Mapping[str, Any] | None = field(default=None, compare=False)
    """The figures of its NCCL preflight (dtjob.core.preflight), once that init container ended with them."""
    disruption: str = ""
    """Why Kubernetes seems to be taking a pod away that has not ended as disrupted (yet): a
    DisruptionTarget condition, or its node NotReady, gone or tainted to go. Empty when nothing says so."""
    node_silent: bool = False
    """Not ended, on a node that is not Ready or is gone: its processes may still hold their sockets open
    (no kubelet stopped them), so a peer may wait on them until a collective times out."""
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    annotations: Mapping[str, str] = field(default_factory=dict, compare=False)
    member: str = ""
    """The member it is, named as the member's own pod is (names.pod_name): its name, but for a hot spare
    that took a member's rank (it keeps its own name), whose role and index labels say which."""
    spare: bool = False
    """A hot spare waiting outside the gang (spec.replicas[].spares): no index, rank or attempt yet."""
    exited: bool = False
    """Its trainer container terminated (or the pod reached a terminal phase): its process is gone."""

    def __post_init__(self) -> None:
        if not self.member:
            object.__setattr__(self, "member", self.name)

    @property
    def deleted_by_hand(self) -> bool:
        """Deleted (or gone) with no disruption condition: by a person or a controller, not by Kubernetes,
        whatever it exited with on the SIGTERM that followed."""
        return self.state == PodState.LOST or (self.terminating and self.state != PodState.PREEMPTED)


@dataclass(frozen=True)
class NodeView:
    name: str
    not_ready_since: datetime | None
    """When the Ready condition last left True; None while the node is Ready."""
    not_ready_reason: str = ""
    going_away: str = ""
    """A taint of DISRUPTION_TAINTS the node carries, if any."""
    shutting_down: bool = False
    """Its kubelet says so (Ready False: "node is shutting down"): its graceful node shutdown, as GKE
    starts it in a Spot VM's 30 s reclaim notice, stops the node's pods on SIGTERM. Not silent."""


@dataclass(frozen=True)
class Observed:
    service: Mapping[str, Any] | None
    pods: tuple[PodView, ...]
    """The gang's pods (of every attempt); not the spares."""
    network_policy: Mapping[str, Any] | None = None
    spares: tuple[PodView, ...] = ()
    """The hot spares, by name."""

    def of_attempt(self, attempt: int) -> tuple[PodView, ...]:
        return tuple(p for p in self.pods if p.attempt == attempt)

    def not_of_attempt(self, attempt: int) -> tuple[PodView, ...]:
        return tuple(p for p in self.pods if p.attempt != attempt)

    def recheck_at(self) -> datetime | None:
        """The soonest moment a pod's view changes by time alone."""
        return min((p.recheck_at for p in self.pods if p.recheck_at is not None), default=None)


def observe(
    children: Sequence[Mapping[str, Any]], now: datetime, nodes: Sequence[Mapping[str, Any]] | None = None
) -> Observed:
    """Classify the job's pods. `nodes`: the Node objects named by `nodes_to_judge`, read after the pods
    (a bound pod whose node is absent sits on a deleted node); None when unknown, which skips node checks."""
    known = None if nodes is None else {v.name: v for v in map(node_view, nodes)}
    service = next((c for c in children if c.get("kind") == "Service"), None)
    network_policy = next((c for c in children if c.get("kind") == "NetworkPolicy"), None)
    pods = sorted(
        (classify(c, now, known) for c in children if c.get("kind") == "Pod"),
        key=lambda p: (p.attempt or 0, p.name),
    )
    return Observed(
        service=service,
        pods=tuple(p for p in pods if not p.spare),
        network_policy=network_policy,
        spares=tuple(p for p in pods if p.spare),
    )


# What a watch cache keeps of a pod: all that `classify`, `nodes_to_judge` and the plan read. The rest
# (the containers' env, volumes, managedFields) is most of a pod's size and never read.
POD_METADATA: Final = (
    "name", "namespace", "uid", "resourceVersion", "labels", "annotations", "ownerReferences",
    "creationTimestamp", "deletionTimestamp",
)  # fmt: skip


POD_CONDITIONS: Final = frozenset({"Ready", "PodScheduled", "DisruptionTarget"})
POD_CONDITION_FIELDS: Final = ("type", "status", "reason", "message", "lastTransitionTime")


def pod_essentials(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {k: meta[k] for k in POD_METADATA if k in meta},
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": [{"name": c.get("name")} for c in spec.get("containers") or []],
        },
        "status": {
            **{k: status[k] for k in ("phase", "reason", "message") if k in status},
            "conditions": [
                {k: c[k] for k in POD_CONDITION_FIELDS if k in c}
                for c in status.get("conditions") or []
                if c.get("type") in POD_CONDITIONS
            ],
            "containerStatuses": [
                {k: c[k] for k in ("name", "image", "state") if k in c}
                for c in status.get("containerStatuses") or []
            ],
            "initContainerStatuses": [
                {k: c[k] for k in ("name", "image", "state", "started", "restartCount") if k in c}
                for c in status.get("initContainerStatuses") or []
                if c.get("name") == PREFLIGHT_CONTAINER or c.get("name") in DAEMON_SIDECARS
            ],
        },
    }


def node_essentials(node: Mapping[str, Any]) -> dict[str, Any]:
    """What `node_view` reads: the name, the creation time, the Ready condition and disruption taints."""
    meta = node.get("metadata") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    taints = (node.get("spec") or {}).get("taints") or []
    return {
        "metadata": {"name": meta.get("name"), "creationTimestamp": meta.get("creationTimestamp")},
        "spec": {"taints": [{"key": t.get("key")} for t in taints if t.get("key") in DISRUPTION_TAINTS]},
        "status": {
            "conditions": [
                {k: c[k] for k in POD_CONDITION_FIELDS if k in c}
                for c in conditions
                if c.get("type") == "Ready"
            ]
        },
    }


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """Whether the job with this uid owns `obj` (not a namesake of a job deleted and created again)."""
    return any(ref.get("uid") == uid for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def nodes_to_judge(children: Sequence[Mapping[str, Any]]) -> list[str]:
    """The nodes whose state can change how a pod is seen: those of the bound pods `_node_matters` for.
    What the adapter reads for `observe`, so a job whose pods ended and are left alone costs no read."""
    return sorted(
        {
            node
            for c in children
            if c.get("kind") == "Pod" and (node := (c.get("spec") or {}).get("nodeName")) and _node_matters(c)
        }
    )


def _node_matters(pod: Mapping[str, Any]) -> bool:
    """A pod that has not ended can be lost with its node; one being deleted can be stuck on a lost node
    (even after it ended: the kubelet still has to confirm). One that ended and is left alone cannot:
    its end is known, and a delete of it takes effect at once (the apiserver gives ended pods no grace)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in TERMINAL_PHASES or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def node_view(node: Mapping[str, Any]) -> NodeView:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    name = str((node.get("metadata") or {}).get("name", ""))
    taints = ((node.get("spec") or {}).get("taints")) or []
    going_away = next((str(t["key"]) for t in taints if t.get("key") in DISRUPTION_TAINTS), "")
    if ready.get("status") == "True":
        return NodeView(name, None, going_away=going_away)
    since = ready.get("lastTransitionTime")
    # A node that never reported Ready is as lost as one that stopped: count from its creation.
    since = since or (node.get("metadata") or {}).get("creationTimestamp")
    reason = f"Ready={ready.get('status', 'Unknown')}: {ready.get('message') or ready.get('reason', '')}"
    shutting_down = ready.get("status") == "False" and KUBELET_SHUTTING_DOWN in str(ready.get("message", ""))
    return NodeView(
        name, parse_timestamp(since) if since else NEVER, reason.rstrip(": "), going_away, shutting_down
    )


@dataclass(frozen=True)
class _Facts:
    """The parts of a pod the rules read, with the node's and the clock's verdicts already made."""

    phase: str
    reason: str
    message: str
    conditions: Mapping[str, Mapping[str, Any]]
    trainer: Mapping[str, Any]
    """The trainer container's status (name, image, state)."""
    terminating: bool
    node_lost: str | None
    """Why the pod's node is gone for good (deleted, or NotReady past the grace); None if it is not."""
    node_shutting_down: str
    """Why the pod's node is shutting down (its kubelet says so), or ""."""
    image_error_persists: bool
    daemon_not_ready: str = ""
    """Which GPUDirect daemon sidecar keeps failing to start (its startup probe), if one does."""


Classification = tuple[PodState, str, str]
_Rule = Callable[[_Facts], Classification | None]


def _disrupted(facts: _Facts) -> Classification | None:
    # A DisruptionTarget on a pod that is still running and not being deleted is a plan that may be
    # dropped (the disruption controller clears stale ones): it counts once the pod ends or is deleted.
    target = facts.conditions.get("DisruptionTarget", {})
    ending = facts.phase == "Failed" or facts.terminating
    if ending and target.get("status") == "True" and target.get("reason") in DISRUPTION_REASONS:
        return PodState.PREEMPTED, str(target["reason"]), str(target.get("message", ""))
    if facts.phase == "Failed" and facts.reason in DISRUPTED_POD_REASONS:
        return PodState.PREEMPTED, facts.reason, facts.message
    return None


def _node_shutting_down(facts: _Facts) -> Classification | None:
    # The kubelet stops the pod itself (SIGTERM: its trainer saves with its peers and exits) and marks it
    # Failed with DisruptionTarget once it has: a preemption from the notice on, not from the pod's end.
    if facts.node_shutting_down and facts.phase not in TERMINAL_PHASES:
        return PodState.PREEMPTED, "NodeShutdown", facts.node_shutting_down
    return None


def _node_lost(facts: _Facts) -> Classification | None:
    if facts.node_lost and facts.phase not in TERMINAL_PHASES:
        return PodState.PREEMPTED, "NodeLost", facts.node_lost
    return None


def _daemon_down(facts: _Facts) -> Classification | None:
    # The node's host components are broken (the daemon never initialises there): not the code's fault.
    if facts.daemon_not_ready and facts.phase not in TERMINAL_PHASES:
        return PodState.PREEMPTED, DAEMON_NOT_READY, facts.daemon_not_ready
    return None


def _deleted(facts: _Facts) -> Classification | None:
    if facts.terminating and facts.phase not in TERMINAL_PHASES:
        return PodState.LOST, "Deleted", "the pod was deleted before it ended, with no disruption condition"
    return None


def _image_error(facts: _Facts) -> Classification | None:
    waiting = (facts.trainer.get("state") or {}).get("waiting") or {}
    if facts.phase == "Pending" and facts.image_error_persists:
        image = facts.trainer.get("image", "")
        return PodState.FAILED, str(waiting["reason"]), f"image {image}: {waiting.get('message', '')}"
    return None


def _ended(facts: _Facts) -> Classification | None:
    terminated = (facts.trainer.get("state") or {}).get("terminated") or {}
    if facts.phase == "Succeeded":
        return (
            PodState.SUCCEEDED,
            str(terminated.get("reason", "Completed")),
            str(terminated.get("message", "")),
        )
    if facts.phase == "Failed":
        reason = str(terminated.get("reason") or facts.reason or "Failed")
        message = str(terminated.get("message") or facts.message)
        return PodState.FAILED, *_trainer_outcome(reason, message)
    return None


def _trainer_outcome(reason: str, message: str) -> tuple[str, str]:
    """The trainer runtime writes its outcome as JSON ({"reason": ..., "message": ...}) into the
    termination message: its reason and message then say more than the container's "Error"."""
    try:
        outcome = json.loads(message)
    except ValueError:
        return reason, message
    if isinstance(outcome, dict) and isinstance(outcome.get("reason"), str):
        return outcome["reason"], str(outcome.get("message", ""))
    return reason, message


def _live(facts: _Facts) -> Classification | None:
    if facts.phase == "Running":
        ready = facts.conditions.get("Ready", {}).get("status") == "True"
        return (PodState.READY if ready else PodState.RUNNING), "", ""
    if facts.phase == "Pending":
        waiting = (facts.trainer.get("state") or {}).get("waiting") or {}
        scheduled = facts.conditions.get("PodScheduled", {})
        if waiting:
            return PodState.PENDING, str(waiting.get("reason", "")), str(waiting.get("message", ""))
        return PodState.PENDING, str(scheduled.get("reason", "")), str(scheduled.get("message", ""))
    return None


CLASSIFIERS: Final[tuple[_Rule, ...]] = (
    _disrupted,
    _node_shutting_down,
    _node_lost,
    _daemon_down,
    _deleted,
    _image_error,
    _ended,
    _live,
)


def classify(pod: Mapping[str, Any], now: datetime, nodes: Mapping[str, NodeView] | None = None) -> PodView:
    """One pod as the gang policy sees it. `nodes`: the nodes known to exist, by name (None: unknown)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    node = spec.get("nodeName")
    conditions = {str(c.get("type")): c for c in status.get("conditions") or []}
    preflight = _preflight_status(status)
    trainer = _trainer_status(spec, status, preflight)
    created = _time(meta.get("creationTimestamp"))
    deletion_due = _time(meta.get("deletionTimestamp"))
    node_lost, node_lost_at = _node_verdict(node, nodes, now) if _node_matters(pod) else (None, None)
    image_error_at = _image_error_at(trainer, conditions, created, now)
    facts = _Facts(
        phase=str(status.get("phase", "Pending")),
        reason=str(status.get("reason", "")),
        message=str(status.get("message", "")),
        conditions=conditions,
        trainer=trainer,
        terminating=deletion_due is not None,
        node_lost=node_lost,
        node_shutting_down=_node_shutting_down_now(node, nodes) if _node_matters(pod) else "",
        image_error_persists=image_error_at is not None and now >= image_error_at,
        daemon_not_ready=_daemon_not_ready(status, node),
    )
    state, reason, message = next(
        (found for rule in CLASSIFIERS if (found := rule(facts)) is not None),
        (PodState.UNKNOWN, facts.reason, facts.message),
    )
    scheduled = conditions.get("PodScheduled", {})
    terminated = (trainer.get("state") or {}).get("terminated") or {}
    # The grace a deletion grants (deletionTimestamp is when it runs out) counts only on a lost node.
    stuck_at = max(deletion_due, node_lost_at) if deletion_due and node_lost_at else None
    name, role, index = (
        str(meta.get("name", "")),
        _role(labels.get(ROLE_LABEL)),
        _int(labels.get(REPLICA_INDEX_LABEL)),
    )
    job_name = labels.get(JOB_NAME_LABEL)
    return PodView(
        name=name,
        uid=str(meta.get("uid", "")),
        role=role,
        index=index,
        attempt=_int(labels.get(ATTEMPT_LABEL)),
        state=state,
        reason=reason,
        message=message,
        exit_code=_int(terminated.get("exitCode")),
        node=node,
        created=created,
        ended_at=_time(terminated.get("finishedAt")),
        terminating=deletion_due is not None,
        unschedulable=scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable",
        stuck=stuck_at is not None and now >= stuck_at,
        recheck_at=min((t for t in (node_lost_at, image_error_at, stuck_at) if t and t > now), default=None),
        disruption=_disruption(conditions, node, nodes) if _node_matters(pod) else "",
        node_silent=_node_matters(pod) and _node_silent(node, nodes),
        preflight=result_of(str(((preflight.get("state") or {}).get("terminated") or {}).get("message", ""))),
        labels=labels,
        annotations=meta.get("annotations") or {},
        member=(
            pod_name(job_name, role, index)
            if job_name and role and index is not None and named_as_spare(name)
            else name
        ),
        spare=labels.get(SPARE_LABEL) == "true",
        exited=bool(terminated) or facts.phase in TERMINAL_PHASES,
    )


def _node_silent(node: str | None, nodes: Mapping[str, NodeView] | None) -> bool:
    if not node or nodes is None:
        return False
    view = nodes.get(node)
    return view is None or (view.not_ready_since is not None and not view.shutting_down)


def _node_shutting_down_now(node: str | None, nodes: Mapping[str, NodeView] | None) -> str:
    view = (nodes or {}).get(node or "")
    return f"node {node} is shutting down (its kubelet stops its pods)" if view and view.shutting_down else ""


def _disruption(
    conditions: Mapping[str, Mapping[str, Any]], node: str | None, nodes: Mapping[str, NodeView] | None
) -> str:
    """What says Kubernetes is taking a live pod away, before anything final does (see PodView)."""
    target = conditions.get("DisruptionTarget", {})
    if target.get("status") == "True" and target.get("reason") in DISRUPTION_REASONS:
        return f"DisruptionTarget {target['reason']}: {target.get('message', '')}".rstrip(": ")
    if not node or nodes is None:
        return ""
    view = nodes.get(node)
    if view is None:
        return f"node {node} no longer exists"
    if view.not_ready_since is not None:
        return f"node {node} is not Ready ({view.not_ready_reason})"
    return f"node {node} has the taint {view.going_away}" if view.going_away else ""


def _node_verdict(
    node: str | None, nodes: Mapping[str, NodeView] | None, now: datetime
) -> tuple[str | None, datetime | None]:
    """Why the pod's node counts as lost now (or None), and from when it does (or will) count as lost."""
    if not node or nodes is None:
        return None, None
    view = nodes.get(node)
    if view is None:
        return f"node {node} no longer exists", now
    if view.not_ready_since is None:
        return None, None
    lost_at = view.not_ready_since + NODE_NOT_READY_GRACE
    if now < lost_at:
        return None, lost_at
    return (
        f"node {node} has been NotReady for over {NODE_NOT_READY_GRACE.seconds}s ({view.not_ready_reason})",
        lost_at,
    )


def _image_error_at(
    trainer: Mapping[str, Any],
    conditions: Mapping[str, Mapping[str, Any]],
    created: datetime | None,
    now: datetime,
) -> datetime | None:
    """When the trainer's current image error (if any) counts as persistent."""
    reason = ((trainer.get("state") or {}).get("waiting") or {}).get("reason")
    if reason in FINAL_IMAGE_ERRORS:
        return now
    if reason not in RETRIED_IMAGE_ERRORS:
        return None
    scheduled = _time(conditions.get("PodScheduled", {}).get("lastTransitionTime")) or created or now
    return scheduled + IMAGE_PULL_GRACE


def _daemon_not_ready(status: Mapping[str, Any], node: str | None) -> str:
    """A GPUDirect daemon sidecar the kubelet restarted DAEMON_NOT_READY_RESTARTS times without its
    startup probe ever passing, said as a message naming the node; empty when none."""
    for daemon in status.get("initContainerStatuses") or []:
        restarts = daemon.get("restartCount") or 0
        if (
            daemon.get("name") in DAEMON_SIDECARS
            and not daemon.get("started")
            and restarts >= DAEMON_NOT_READY_RESTARTS
        ):
            return (
                f"the GPUDirect daemon {daemon['name']} never became ready on node {node} (restarted "
                f"{restarts} times, its startup probe never passed): the node's GPU network is broken"
            )
    return ""


def _preflight_status(status: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = status.get("initContainerStatuses") or []
    return next((s for s in statuses if s.get("name") == PREFLIGHT_CONTAINER), {})


def _trainer_status(
    spec: Mapping[str, Any], status: Mapping[str, Any], preflight: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The status of the container that got the wiring: "trainer", else the first declared one; or the
    NCCL preflight's, when it ended the pod before the trainer started (it failed)."""
    terminated = (preflight.get("state") or {}).get("terminated") or {}
    if terminated.get("exitCode") not in (None, 0):
        return preflight
    statuses = {s.get("name"): s for s in status.get("containerStatuses") or []}
    containers = spec.get("containers") or []
    names = [c.get("name") for c in containers]
    name = TRAINER_CONTAINER if TRAINER_CONTAINER in names else (names[0] if names else None)
    found: Mapping[str, Any] = statuses.get(name) or {}
    return found


def _time(value: Any) -> datetime | None:
    return parse_timestamp(value) if isinstance(value, str) and value else None


def _role(value: Any) -> Role | None:
    return Role(value) if value in set(Role) else None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
