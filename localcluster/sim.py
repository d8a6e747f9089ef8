"""Helpers tests use to play the kubelet of fake (kwok) nodes: see kwok-stages.yaml for the annotations.

Besides the ends kwok plays on an annotation, the helpers below write what a real kubelet or node
controller writes, step by step, so that a test can play the orderings seen on GKE: the peers of a
preempted pod crash (exit 1) before its own status or its node says anything.

A whole node shutdown (a Spot reclaim, a maintenance event) is played as explicit steps, in GKE's and
the kubelet's order, the test polling for what the operator does in between (no step sleeps):

1. the peers on other nodes see their collective break and exit 1 first (`exit_pod`);
2. `begin_node_shutdown`: GKE taints the node `impending-node-termination`, and the kubelet's shutdown
   manager turns it NotReady ("node is shutting down"); from then on the test is that node's kubelet;
3. `mark_disruption_target` on each of its pods, still running: the kubelet begins to kill them;
4. `end_after_shutdown`, once the grace period is over (after the gang was judged and restarted, for a
   test of a late end): Failed, reason Terminated, the trainer's exit code (137: killed at the end
   of its grace; 200 or torchrun's 1: it saved on SIGTERM);
5. `finalise_pod`: the kubelet confirms the deletion of a pod that ended (or the node is deleted, and
   nothing ever will).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from localcluster import fakenodes

# The kubelet's words: node shutdown's exact message (pkg/kubelet/nodeshutdown), and a node-pressure
# eviction's in the shape pkg/kubelet/eviction gives it.
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
PRESSURE_MESSAGE = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51Mi."
GKE_TERMINATION_TAINT = "cloud.google.com/impending-node-termination"
# The Ready condition's message while the kubelet's shutdown manager runs (pkg/kubelet/nodeshutdown), and
# the pod's status.reason once it killed the pod (nodeShutdownReason).
NODE_SHUTTING_DOWN = "node is shutting down"
SHUTDOWN_REASON = "Terminated"

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


def add_gpu_node(
    cluster: Any,
    index: int,
    spot: bool = False,
    accelerator: str = fakenodes.DEFAULT_ACCELERATOR,
    extra_taints: tuple[dict, ...] = (),
) -> str:
    node = fakenodes.gpu_node(index, accelerator=accelerator, spot=spot, extra_taints=extra_taints)
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
    _release_and_report_ready(
        core, node, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
    )


def _release_and_report_ready(core: Any, node: str, status: str, reason: str, message: str) -> None:
    """kwok lets go of the node first (it would report it Ready again at once), then the node's Ready
    condition says `status`. Its pods are left as they are: the test plays their kubelet from here."""
    core.patch_node(node, {"metadata": {"annotations": {fakenodes.FAKE_NODE_ANNOTATION: None}}})
    condition = {"type": "Ready", "status": status, "reason": reason, "message": message,
                 "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}  # fmt: skip
    core.patch_node_status(node, {"status": {"conditions": [condition]}})


def begin_node_shutdown(core: Any, namespace: str, node: str, pods: list[str]) -> None:
    """A node shutdown's first words, in GKE's order (step 2 of the module's sequence).

    - Its `pods` are never finalised by kwok from now on (`stick_terminating`): a kubelet that is
      shutting down confirms a deletion only after it killed the pod, so a pod the operator deletes
      stays, terminating, until the test plays its end (`end_after_shutdown`, `finalise_pod`). This
      comes first, so that no deletion can slip through between the steps.
    - GKE taints the node `cloud.google.com/impending-node-termination` as soon as the VM is told it
      will go (the Spot or maintenance notice, about 30 s ahead).
    - The kubelet's shutdown manager turns the node NotReady (reason KubeletNotReady, "node is shutting
      down"); the node lifecycle controller then adds its `node.kubernetes.io/not-ready` taints itself.
    """
    for pod in pods:
        stick_terminating(core, namespace, pod)
    taint_for_termination(core, node)
    _release_and_report_ready(core, node, "False", "KubeletNotReady", NODE_SHUTTING_DOWN)


def end_after_shutdown(
    core: Any, namespace: str, name: str, uid: str, exit_code: int = 137, message: str = ""
) -> bool:
    """The pod's end once the shutdown grace period is over (step 4): phase Failed, reason Terminated and
    the shutdown message, as the kubelet's shutdown manager writes them beside the DisruptionTarget it
    wrote first (`mark_disruption_target`); every container terminated with `exit_code` (137: killed at
    the end of its grace; 200, or torchrun's 1, when the trainer saved on SIGTERM) and the trainer's
    termination `message`. It may come late, after the operator restarted the gang and deleted the pod.

    `uid` is the pod the kubelet ran: the next attempt's pod has the same name and must not be touched.
    Returns False, writing nothing, when that pod is already gone (force-deleted, or collected with its
    node): a kubelet's late report then has nothing left to land on."""
    terminated = {"exitCode": exit_code, "reason": "Error", "message": message, "finishedAt": _now()}
    try:
        if core.read_namespaced_pod(name, namespace).metadata.uid != uid:
            return False
        ready = [{"type": kind, "status": "False", "reason": "PodFailed", "lastTransitionTime": _now()}
                 for kind in ("Ready", "ContainersReady")]  # fmt: skip
        status = {"phase": "Failed", "reason": SHUTDOWN_REASON, "message": SHUTDOWN_MESSAGE, "conditions": ready,
                  "containerStatuses": _all_terminated(core, namespace, name, terminated)}  # fmt: skip
        core.patch_namespaced_pod_status(name, namespace, {"status": status})
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def finalise_pod(core: Any, namespace: str, name: str, uid: str) -> bool:
    """The kubelet's last word on a pod that ended while being deleted (step 5): it confirms the deletion
    with no grace and a UID precondition, as the kubelet's status manager does, and the pod is gone.
    Returns False when that pod was already gone (404, or 409: the name is now another pod's)."""
    try:
        # Both in the body: the apiserver reads a DELETE's options from its body when it has one.
        core.delete_namespaced_pod(
            name, namespace, body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        )
    except ApiException as err:
        if err.status in (404, 409):
            return False
        raise
    return True


def trainer_outcome(reason: str, message: str, step: int) -> str:
    """The termination message the trainer runtime writes on SIGTERM (docs/trainer-runtime.md)."""
    return json.dumps({"reason": reason, "message": message, "step": step})
