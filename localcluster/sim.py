"""Helpers tests use to play the kubelet of fake (kwok) nodes: see kwok-stages.yaml for the annotations.

Besides the ends kwok plays on an annotation, the helpers below write what a real kubelet or node
controller writes, step by step, so that a test can play the orderings seen on GKE: the peers of a
preempted pod crash (exit 1) before its own status or its node says anything.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from localcluster import fakenodes

# The kubelet's words: node shutdown's exact message (pkg/kubelet/nodeshutdown), and a node-pressure
# eviction's in the shape pkg/kubelet/eviction gives it.
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
PRESSURE_MESSAGE = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51Mi."
GKE_TERMINATION_TAINT = "cloud.google.com/impending-node-termination"

EXIT_CODE = "sim.dtjob.io/exit-code"
REASON = "sim.dtjob.io/reason"
DISRUPTION = "sim.dtjob.io/disruption"
STUCK_TERMINATING = "sim.dtjob.io/stuck-terminating"


def _annotate(core: Any, namespace: str, name: str, annotations: dict[str, str]) -> None:
    core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}})


def exit_pod(core: Any, namespace: str, name: str, exit_code: int, reason: str | None = None) -> None:
    """The pod's containers terminate with `exit_code` (0: Succeeded, else Failed)."""
    _annotate(core, namespace, name, {EXIT_CODE: str(exit_code), **({REASON: reason} if reason else {})})


def preempt_pod(core: Any, namespace: str, name: str, reason: str = "TerminationByKubelet") -> None:
    """What GKE spot preemption leaves behind: Failed/Terminated with DisruptionTarget=True (`reason`)."""
    _annotate(core, namespace, name, {DISRUPTION: reason})


def stick_terminating(core: Any, namespace: str, name: str) -> None:
    """Once deleted, the pod is never finalised, like a pod whose node's kubelet is gone."""
    _annotate(core, namespace, name, {STUCK_TERMINATING: "true"})


def add_gpu_node(cluster: Any, index: int, spot: bool = False) -> str:
    node = fakenodes.gpu_node(index, spot=spot)
    fakenodes.apply_nodes(cluster.layout, [node])
    name: str = node["metadata"]["name"]
    cluster.wait_nodes_ready(1, label=f"kubernetes.io/hostname={name}", timeout=60)
    cluster.wait_node_schedulable(name, timeout=60)
    return name


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def mark_disruption_target(
    core: Any, namespace: str, name: str, reason: str = "TerminationByKubelet"
) -> None:
    """What a kubelet whose node begins to shut down writes first: DisruptionTarget on a pod still running
    (it ends only when its grace period is over, or never if the VM dies first)."""
    condition = {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": SHUTDOWN_MESSAGE,
                 "lastTransitionTime": _now()}  # fmt: skip
    core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [condition]}})


def end_pod(core: Any, namespace: str, name: str, exit_code: int, message: str = "") -> None:
    """The trainer container ended with `exit_code` and wrote `message` as its termination message."""
    terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                  "message": message, "finishedAt": _now()}  # fmt: skip
    statuses = _all_terminated(core, namespace, name, terminated)
    phase = "Succeeded" if exit_code == 0 else "Failed"
    core.patch_namespaced_pod_status(
        name, namespace, {"status": {"phase": phase, "containerStatuses": statuses}}
    )


def _all_terminated(core: Any, namespace: str, name: str, terminated: dict[str, Any]) -> list[dict[str, Any]]:
    """Container statuses saying every container of the pod ended as `terminated` says."""
    pod = core.read_namespaced_pod(name, namespace)
    return [{"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0,
             "state": {"terminated": terminated}} for c in pod.spec.containers]  # fmt: skip


def evict_for_pressure(core: Any, namespace: str, name: str) -> None:
    """A node-pressure eviction as the kubelet records it: Failed, reason Evicted, and DisruptionTarget
    TerminationByKubelet; the container killed (137)."""
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                 "message": PRESSURE_MESSAGE, "lastTransitionTime": _now()}  # fmt: skip
    terminated = {"exitCode": 137, "reason": "Error", "finishedAt": _now()}
    statuses = _all_terminated(core, namespace, name, terminated)
    status = {"phase": "Failed", "reason": "Evicted", "message": PRESSURE_MESSAGE, "conditions": [condition],
              "containerStatuses": statuses}  # fmt: skip
    core.patch_namespaced_pod_status(name, namespace, {"status": status})


def taint_for_termination(core: Any, node: str) -> None:
    """GKE's taint on a node about to be reclaimed (Spot) or taken for maintenance."""
    taints = core.read_node(node).spec.taints or []
    taint = {"key": GKE_TERMINATION_TAINT, "value": "true", "effect": "NoSchedule"}
    core.patch_node(node, {"spec": {"taints": [t.to_dict() for t in taints] + [taint]}})


def silence_node(core: Any, node: str) -> None:
    """The VM is gone without a word: no kubelet reports any more (kwok lets go of the node), and the node
    controller marks it Ready=Unknown. Its pods still say Running."""
    core.patch_node(node, {"metadata": {"annotations": {fakenodes.FAKE_NODE_ANNOTATION: None}}})
    condition = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": _now(),
                 "lastTransitionTime": _now()}  # fmt: skip
    core.patch_node_status(node, {"status": {"conditions": [condition]}})


def trainer_outcome(reason: str, message: str, step: int) -> str:
    """The termination message the trainer runtime writes on SIGTERM (docs/trainer-runtime.md)."""
    return json.dumps({"reason": reason, "message": message, "step": step})
