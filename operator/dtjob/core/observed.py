"""What a job's children look like right now: each pod classified, grouped by attempt. Pure.

How one pod is classified is `dtjob.core.classify`; the views it fills in are `dtjob.core.views`. What
the rest of the operator reads of either is re-exported here (`__all__`), its import path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from dtjob.api import parse_timestamp
from dtjob.core.classify import (
    DAEMON_NOT_READY,
    IMAGE_ERRORS,
    IMAGE_PULL_GRACE,
    NODE_NOT_READY_GRACE,
    PREEMPTED_CHECKPOINT_SAVED,
    classify,
    node_matters,
)
from dtjob.core.gke import COMPUTE_CLASS_LABEL, DAEMON_SIDECARS
from dtjob.core.preflight import PREFLIGHT_CONTAINER
from dtjob.core.views import ACTIVE_STATES, ENDED_ABNORMALLY, NodeView, PodState, PodView

# The import path of a pass's view of its children: what classify and views define is read from here.
__all__ = [
    "ACTIVE_STATES",
    "DAEMON_NOT_READY",
    "ENDED_ABNORMALLY",
    "IMAGE_ERRORS",
    "IMAGE_PULL_GRACE",
    "NODE_NOT_READY_GRACE",
    "PREEMPTED_CHECKPOINT_SAVED",
    "NodeView",
    "Observed",
    "PodState",
    "PodView",
    "classify",
    "node_essentials",
    "node_view",
    "nodes_to_judge",
    "observe",
    "owned_by",
    "pod_essentials",
]

# What the kubelet's Ready condition says while its graceful node shutdown runs (pkg/kubelet/nodeshutdown,
# v1.34.4: ShutdownStatus).
KUBELET_SHUTTING_DOWN: Final = "node is shutting down"
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

    def live_of_attempt(self, attempt: int) -> tuple[PodView, ...]:
        """The attempt's pods that hold or will hold a place: pending or running, not on their way out."""
        return tuple(p for p in self.of_attempt(attempt) if p.state in ACTIVE_STATES and not p.terminating)

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
    """What `node_view` reads: the name, the creation time, the Ready condition and disruption taints; and
    the ComputeClass GKE made it for (gke.autopilot_cluster)."""
    meta = node.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k == COMPUTE_CLASS_LABEL}
    conditions = (node.get("status") or {}).get("conditions") or []
    taints = (node.get("spec") or {}).get("taints") or []
    return {
        "metadata": {
            "name": meta.get("name"),
            "creationTimestamp": meta.get("creationTimestamp"),
            **({"labels": labels} if labels else {}),
        },
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
    """The nodes whose state can change how a pod is seen: those of the bound pods `node_matters` for.
    What the adapter reads for `observe`, so a job whose pods ended and are left alone costs no read."""
    return sorted(
        {
            node
            for c in children
            if c.get("kind") == "Pod" and (node := (c.get("spec") or {}).get("nodeName")) and node_matters(c)
        }
    )


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
