"""One pod's state from its fields, its node and the time. Pure.

Classification is an ordered chain of small rules over one pod (first match wins). What a pod's end
means for the gang (a preemption, a failure worth retrying, a permanent one) is decided from this view
and the restart policy in `decide.fault_of`; here a pod is only described as Kubernetes reports it, with
the time-based judgements (a node NotReady too long, an image error that persists, a pod stuck
Terminating) made against `now`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from dtjob.api import Role, parse_timestamp
from dtjob.core.gke import DAEMON_NOT_READY_RESTARTS, DAEMON_SIDECARS
from dtjob.core.kueue_pod_gate import HELD_BY_KUEUES_POD_INTEGRATION, held_by_kueues_pod_integration
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
from dtjob.core.views import NodeView, PodState, PodView

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
# The message of a pod the kubelet refused at admission, before any container ran (kubelet.go: rejectPod;
# status.reason is the failed check: NodeAffinity when the kubelet has not yet seen a label the scheduler
# placed it by, OutOfcpu, UnexpectedAdmissionError when a device plugin restarts...): the node's doing.
KUBELET_REJECTED: Final = "Pod was rejected: "
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
# The trainer runtime's termination message reason for "stopped on SIGTERM, checkpoint saved" (torchrun
# exits 1 after its workers wrote it and exited 200; see docs/trainer-runtime.md).
PREEMPTED_CHECKPOINT_SAVED: Final = "PreemptedCheckpointSaved"
# The reason of a pod whose GPUDirect daemon sidecar never became ready on its node.
DAEMON_NOT_READY: Final = "DaemonNotReady"


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
    kueue_gated: bool = False  # Kueue's pod integration holds the pod (core/kueue_pod_gate.py)


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
    if (
        facts.phase == "Failed"
        and facts.message.startswith(KUBELET_REJECTED)
        and not facts.trainer.get("state")
    ):
        return PodState.PREEMPTED, facts.reason or "Rejected", facts.message
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
        if facts.kueue_gated:
            return PodState.PENDING, str(scheduled.get("reason", "")), HELD_BY_KUEUES_POD_INTEGRATION
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
    matters = node_matters(pod)
    node_lost, node_lost_at = _node_verdict(node, nodes, now) if matters else (None, None)
    image_error_at = _image_error_at(trainer, conditions, created, now)
    facts = _Facts(
        phase=str(status.get("phase", "Pending")),
        reason=str(status.get("reason", "")),
        message=str(status.get("message", "")),
        conditions=conditions,
        trainer=trainer,
        terminating=deletion_due is not None,
        node_lost=node_lost,
        node_shutting_down=_node_shutting_down_now(node, nodes) if matters else "",
        image_error_persists=image_error_at is not None and now >= image_error_at,
        daemon_not_ready=_daemon_not_ready(status, node),
        kueue_gated=held_by_kueues_pod_integration(pod),
    )
    state, reason, message = _verdict(facts)
    scheduled = conditions.get("PodScheduled", {})
    terminated = (trainer.get("state") or {}).get("terminated") or {}
    # The grace a deletion grants (deletionTimestamp is when it runs out) counts only on a lost node.
    stuck_at = max(deletion_due, node_lost_at) if deletion_due and node_lost_at else None
    name = str(meta.get("name", ""))
    role, index = _role(labels.get(ROLE_LABEL)), _int(labels.get(REPLICA_INDEX_LABEL))
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
        unschedulable=(scheduled.get("status"), scheduled.get("reason")) == ("False", "Unschedulable")
        or (facts.kueue_gated and state == PodState.PENDING),
        stuck=stuck_at is not None and now >= stuck_at,
        recheck_at=min((t for t in (node_lost_at, image_error_at, stuck_at) if t and t > now), default=None),
        disruption=_disruption(conditions, node, nodes) if matters else "",
        node_silent=matters and _node_silent(node, nodes),
        preflight=result_of(str(((preflight.get("state") or {}).get("terminated") or {}).get("message", ""))),
        labels=labels,
        annotations=meta.get("annotations") or {},
        member=_member(name, labels.get(JOB_NAME_LABEL), role, index),
        spare=labels.get(SPARE_LABEL) == "true",
        exited=bool(terminated) or facts.phase in TERMINAL_PHASES,
    )


def _verdict(facts: _Facts) -> Classification:
    """The first rule of CLASSIFIERS that matches; Unknown, with the pod's own reason, when none does."""
    return next(
        (found for rule in CLASSIFIERS if (found := rule(facts)) is not None),
        (PodState.UNKNOWN, facts.reason, facts.message),
    )


def _member(name: str, job_name: str | None, role: Role | None, index: int | None) -> str:
    """The member a pod is (PodView.member): a hot spare that took a rank is named by its labels."""
    if job_name and role and index is not None and named_as_spare(name):
        return pod_name(job_name, role, index)
    return name


def node_matters(pod: Mapping[str, Any]) -> bool:
    """A pod that has not ended can be lost with its node; one being deleted can be stuck on a lost node
    (even after it ended: the kubelet still has to confirm). One that ended and is left alone cannot:
    its end is known, and a delete of it takes effect at once (the apiserver gives ended pods no grace)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in TERMINAL_PHASES or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


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
