"""Classifying one pod: what Kubernetes reports (and how long it has reported it), mapped to what the gang
policy needs to know."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dtjob.api import Role
from dtjob.core.observed import (
    IMAGE_PULL_GRACE,
    NODE_NOT_READY_GRACE,
    PodState,
    classify,
    node_essentials,
    node_view,
    nodes_to_judge,
    observe,
)
from tests.support.builders import (
    NOW,
    SHUTTING_DOWN,
    deleted_at,
    deleting,
    disrupted_while_running,
    exited,
    manifest,
    node,
    pending,
    pods_of,
    preempted,
    pulling,
    running,
    service_of,
)

JOB = manifest(("Master", 1), ("Worker", 1))
POD = pods_of(JOB)["mnist-worker-0"]
READY_NODE = [node()]
NO_NODE: list[dict[str, Any]] = []
NOT_READY_30S = [node(ready="Unknown", since="2030-01-01T11:59:30Z")]
NOT_READY_90S = [node(ready="Unknown", since="2030-01-01T11:58:30Z")]
NOT_READY_FALSE_90S = [node(ready="False", since="2030-01-01T11:58:30Z")]


def failed_with_status_reason(reason: str) -> dict[str, Any]:
    pod = exited(POD, 137)
    pod["status"]["reason"] = reason
    return pod


def rejected_by_kubelet(reason: str) -> dict[str, Any]:
    """As the kubelet leaves a pod it refused at admission: Failed, no container status."""
    message = (
        f"Pod was rejected: Predicate {reason} failed: node(s) didn't match Pod's node affinity/selector"
    )
    return {**running(POD), "status": {"phase": "Failed", "reason": reason, "message": message}}


def unknown(pod: dict[str, Any]) -> dict[str, Any]:
    return {**running(pod), "status": {"phase": "Unknown"}}


@pytest.mark.parametrize(
    ("pod", "nodes", "state", "reason"),
    [
        pytest.param(pending(POD), None, PodState.PENDING, "", id="a pod not yet scheduled is pending"),
        pytest.param(pending(POD, unschedulable=True), None, PodState.PENDING, "Unschedulable", id="an unschedulable pod is pending and says why"),
        pytest.param(running(POD, ready=False), None, PodState.RUNNING, "", id="a running pod that is not ready is running"),
        pytest.param(running(POD), None, PodState.READY, "", id="a running ready pod is ready"),
        pytest.param(exited(POD, 0), None, PodState.SUCCEEDED, "Completed", id="a pod whose trainer exited 0 succeeded"),
        pytest.param(exited(POD, 1, message="CUDA error"), None, PodState.FAILED, "Error", id="a trainer that exited 1 failed"),
        pytest.param(exited(POD, 137, reason="OOMKilled"), None, PodState.FAILED, "OOMKilled", id="an out-of-memory kill is a failure that says OOMKilled"),
        pytest.param(exited(POD, 200), None, PodState.FAILED, "Error",
                     id="the trainer's checkpoint-saved exit is an end like any other here, the policy weighs its code"),
        pytest.param(preempted(POD), None, PodState.PREEMPTED, "TerminationByKubelet", id="a GKE spot node shutting down is a preemption"),
        pytest.param(preempted(POD, "PreemptionByScheduler"), None, PodState.PREEMPTED, "PreemptionByScheduler",
                     id="scheduler preemption for a higher-priority pod is a preemption"),
        pytest.param(preempted(POD, "DeletionByTaintManager"), None, PodState.PREEMPTED, "DeletionByTaintManager",
                     id="a NoExecute taint the pod does not tolerate is a preemption"),
        pytest.param(preempted(POD, "EvictionByEvictionAPI"), None, PodState.PREEMPTED, "EvictionByEvictionAPI", id="a drain through the Eviction API is a preemption"),
        pytest.param(preempted(POD, "DeletionByPodGC"), None, PodState.PREEMPTED, "DeletionByPodGC", id="a pod the pod GC failed because its node was deleted is a preemption"),
        pytest.param(failed_with_status_reason("Evicted"), None, PodState.PREEMPTED, "Evicted", id="node-pressure eviction is a preemption"),
        pytest.param(failed_with_status_reason("Terminated"), None, PodState.PREEMPTED, "Terminated",
                     id="graceful node shutdown without a DisruptionTarget condition (Kubernetes 1.22 to 1.25) is a preemption"),
        pytest.param(failed_with_status_reason("Shutdown"), None, PodState.PREEMPTED, "Shutdown",
                     id="graceful node shutdown as Kubernetes 1.21 reported it is a preemption"),
        pytest.param(failed_with_status_reason("NodeShutdown"), None, PodState.PREEMPTED, "NodeShutdown",
                     id="a pod rejected because its node is shutting down is a preemption"),
        pytest.param(rejected_by_kubelet("NodeAffinity"), None, PodState.PREEMPTED, "NodeAffinity",
                     id="a pod the kubelet rejected before it ran (it had not seen the label yet) is a preemption"),
        pytest.param(rejected_by_kubelet("UnexpectedAdmissionError"), None, PodState.PREEMPTED, "UnexpectedAdmissionError",
                     id="a pod the kubelet rejected because its device plugin was away is a preemption"),
        pytest.param(disrupted_while_running(POD, "EvictionByEvictionAPI"), None, PodState.READY, "",
                     id="a DisruptionTarget on a pod nobody deleted is a plan that may be dropped, not yet a preemption"),
        pytest.param(deleting(disrupted_while_running(POD, "EvictionByEvictionAPI")), None, PodState.PREEMPTED, "EvictionByEvictionAPI",
                     id="an evicted pod is a preemption from the moment its deletion starts"),
        pytest.param(deleting(disrupted_while_running(POD, "DeletionByTaintManager")), None, PodState.PREEMPTED, "DeletionByTaintManager",
                     id="a pod the taint manager is deleting is a preemption before it ends"),
        pytest.param(deleting(running(POD)), None, PodState.LOST, "Deleted",
                     id="a running pod deleted with no disruption condition is lost"),
        pytest.param(deleting(exited(POD, 1)), None, PodState.FAILED, "Error", id="a failed pod being deleted is still the failure it was"),
        pytest.param(running(POD), NO_NODE, PodState.PREEMPTED, "NodeLost", id="a running pod whose node was deleted is a preemption"),
        pytest.param(pending(POD), NO_NODE, PodState.PENDING, "", id="a pod bound to no node has no node to lose"),
        pytest.param(running(POD), None, PodState.READY, "", id="without the node list no node counts as lost"),
        pytest.param(running(POD), READY_NODE, PodState.READY, "", id="a running pod on a ready node is ready"),
        pytest.param(running(POD), NOT_READY_30S, PodState.READY, "", id="a node NotReady for less than the grace keeps its pods"),
        pytest.param(running(POD), NOT_READY_90S, PodState.PREEMPTED, "NodeLost", id="a node whose kubelet stopped reporting past the grace is lost"),
        pytest.param(running(POD), NOT_READY_FALSE_90S, PodState.PREEMPTED, "NodeLost", id="a node reporting Ready False past the grace is lost"),
        pytest.param(unknown(POD), None, PodState.UNKNOWN, "", id="a pod in phase Unknown with no node verdict is unknown"),
        pytest.param(unknown(POD), NOT_READY_90S, PodState.PREEMPTED, "NodeLost", id="a pod in phase Unknown on a lost node is a preemption"),
        pytest.param(exited(POD, 1), NO_NODE, PodState.FAILED, "Error", id="a pod that failed before its node went keeps its failure"),
        pytest.param(deleting(running(POD)), NO_NODE, PodState.PREEMPTED, "NodeLost", id="a deleted pod on a lost node is a preemption, not a loss"),
        pytest.param(pulling(POD, "ErrImagePull"), None, PodState.PENDING, "ErrImagePull", id="an image pull error a minute after scheduling may clear"),
        pytest.param(pulling(POD, "ImagePullBackOff", scheduled="2030-01-01T11:57:00Z"), None, PodState.FAILED, "ImagePullBackOff",
                     id="an image pull error that lasted past the grace is a failure"),
        pytest.param(pulling(POD, "InvalidImageName"), None, PodState.FAILED, "InvalidImageName", id="an invalid image name fails at once"),
        pytest.param(pulling(POD, "ErrImageNeverPull"), None, PodState.FAILED, "ErrImageNeverPull",
                     id="an image that is absent under pull policy Never fails at once"),
    ],
)  # fmt: skip
def test_classify(
    pod: dict[str, Any], nodes: list[dict[str, Any]] | None, state: PodState, reason: str
) -> None:
    view = observe([pod], NOW, nodes).pods[0]
    assert (view.state, view.reason) == (state, reason), view.message
    assert (view.role, view.index, view.attempt) == (Role.WORKER, 0, 1)


@pytest.mark.parametrize(
    ("pod", "nodes", "stuck", "recheck_in"),
    [
        pytest.param(deleting(running(POD)), NO_NODE, True, None, id="a pod terminating past its grace on a deleted node is stuck"),
        pytest.param(deleted_at(running(POD), "2030-01-01T12:00:20Z"), NO_NODE, False, 20,
                     id="a pod on a deleted node still within its grace is not stuck yet and is rechecked when the grace ends"),
        pytest.param(deleting(running(POD)), READY_NODE, False, None, id="a pod terminating slowly on a ready node is never stuck: its kubelet will finish it"),
        pytest.param(deleting(running(POD)), NOT_READY_90S, True, None, id="a pod terminating past its grace on a NotReady node is stuck"),
        pytest.param(deleting(running(POD)), NOT_READY_30S, False, 30,
                     id="a pod on a node NotReady for less than the node grace is rechecked when that grace ends"),
        pytest.param(deleting(exited(POD, 1)), NO_NODE, True, None, id="a finished pod whose deletion hangs on a deleted node is stuck too"),
        pytest.param(running(POD), NO_NODE, False, None, id="a pod nobody deleted is not stuck, whatever its node"),
        pytest.param(deleting(running(POD)), None, False, None, id="without the node list nothing is stuck"),
        pytest.param(pulling(POD, "ErrImagePull"), None, False, 60, id="an image error is rechecked when its grace ends"),
    ],
)  # fmt: skip
def test_stuck_pods_and_rechecks(
    pod: dict[str, Any], nodes: list[dict[str, Any]] | None, stuck: bool, recheck_in: int | None
) -> None:
    view = observe([pod], NOW, nodes).pods[0]
    assert view.stuck == stuck
    assert view.recheck_at == (None if recheck_in is None else NOW + timedelta(seconds=recheck_in))


def test_the_graces_are_a_minute_for_nodes_and_two_for_images() -> None:
    assert (NODE_NOT_READY_GRACE.seconds, IMAGE_PULL_GRACE.seconds) == (60, 120)


def test_a_persisting_image_error_names_the_image() -> None:
    view = classify(pulling(POD, "InvalidImageName"), NOW)
    assert view.message.startswith("image trainer:1: ")


def test_a_lost_node_says_which_and_why() -> None:
    nodes = {"gpu-node-1": node_view(NOT_READY_90S[0])}
    view = classify(running(POD), NOW, nodes)
    assert view.message == (
        "node gpu-node-1 has been NotReady for over 60s (Ready=Unknown: Kubelet stopped posting node status.)"
    )
    assert classify(running(POD), NOW, {}).message == "node gpu-node-1 no longer exists"


def test_a_failure_carries_the_trainer_exit_code_and_message() -> None:
    view = classify(exited(POD, 3, message="loss is NaN"), NOW)
    assert (view.exit_code, view.message, view.node) == (3, "loss is NaN", "gpu-node-1")


def test_observe_groups_pods_by_attempt_finds_the_service_and_the_soonest_recheck() -> None:
    old = deleted_at(running(pods_of(JOB, attempt=1)["mnist-worker-0"]), "2030-01-01T12:00:05Z")
    new = [running(p) for p in pods_of(JOB, attempt=2).values()]
    observed = observe([old, service_of(JOB), *new], NOW, NO_NODE)
    assert observed.service is not None and observed.service["metadata"]["name"] == "mnist"
    assert [p.name for p in observed.of_attempt(2)] == ["mnist-master-0", "mnist-worker-0"]
    assert [(p.name, p.terminating) for p in observed.not_of_attempt(2)] == [("mnist-worker-0", True)]
    assert observed.recheck_at() == NOW + timedelta(seconds=5)


def on_node(pod: dict[str, Any], name: str) -> dict[str, Any]:
    pod["spec"]["nodeName"] = name
    return pod


def test_only_the_nodes_of_pods_that_can_still_be_lost_or_stuck_are_read() -> None:
    pods = pods_of(manifest(("Worker", 5)))
    children = [
        service_of(JOB),
        on_node(running(pods["mnist-worker-0"]), "node-running"),
        on_node(exited(pods["mnist-worker-1"], 0), "node-succeeded"),
        on_node(exited(pods["mnist-worker-2"], 1), "node-failed"),
        on_node(deleting(exited(pods["mnist-worker-3"], 1)), "node-failed-and-deleted"),
        pending(pods["mnist-worker-4"]),  # not bound: no node to read
    ]
    assert nodes_to_judge(children) == ["node-failed-and-deleted", "node-running"]


def test_a_pod_that_ended_and_is_left_alone_is_not_judged_by_its_unread_node() -> None:
    view = classify(exited(POD, 1), NOW, {})  # its node was not read, so it is absent
    assert (view.state, view.reason, view.stuck, view.recheck_at) == (PodState.FAILED, "Error", False, None)


def tainted(name: str, key: str) -> dict[str, Any]:
    tainted_node = node(name)
    tainted_node["spec"] = {"taints": [{"key": key, "effect": "NoSchedule"}, {"key": "nvidia.com/gpu"}]}
    return tainted_node


@pytest.mark.parametrize(
    ("pod", "nodes", "disruption"),
    [
        pytest.param(running(POD), [node()], "", id="a running pod on a Ready node: nothing"),
        pytest.param(disrupted_while_running(POD, "TerminationByKubelet"), [node()],
                     "DisruptionTarget TerminationByKubelet: Eviction API: evicting",
                     id="DisruptionTarget on a running pod"),
        pytest.param(running(POD), [node(ready="Unknown", since="2030-01-01T11:59:55Z")],
                     "node gpu-node-1 is not Ready (Ready=Unknown: Kubelet stopped posting node status.)",
                     id="a node not Ready for 5 s, long before it counts as lost"),
        pytest.param(running(POD), [tainted("gpu-node-1", "cloud.google.com/impending-node-termination")],
                     "node gpu-node-1 has the taint cloud.google.com/impending-node-termination",
                     id="GKE's termination taint"),
        pytest.param(running(POD), [tainted("gpu-node-1", "nvidia.com/gpu")], "", id="another taint: nothing"),
        pytest.param(exited(POD, 1), [], "", id="a pod that ended is judged by its end, not by its node"),
        pytest.param(running(POD), [node(ready="False", since="2030-01-01T11:59:59Z", message=SHUTTING_DOWN)],
                     "node gpu-node-1 is not Ready (Ready=False: node is shutting down)",
                     id="its node shutting down"),
    ],
)  # fmt: skip
def test_signs_that_a_live_pod_is_being_taken_away(
    pod: dict[str, Any], nodes: list[dict[str, Any]], disruption: str
) -> None:
    views = {n["metadata"]["name"]: node_view(node_essentials(n)) for n in nodes}
    assert classify(pod, NOW, views).disruption == disruption


def test_a_pod_on_a_node_shutting_down_is_preempted_at_once_and_its_node_is_not_silent() -> None:
    """The kubelet's graceful node shutdown (GKE's Spot VM reclaim) stops the pod on SIGTERM: its
    processes close their sockets, unlike those on a node that went silent."""
    shutting_down = node(ready="False", since="2030-01-01T11:59:59Z", message=f"[{SHUTTING_DOWN}]")
    view = classify(running(POD), NOW, {"gpu-node-1": node_view(node_essentials(shutting_down))})
    assert (view.state, view.reason, view.node_silent) == (PodState.PREEMPTED, "NodeShutdown", False)
    assert view.message == "node gpu-node-1 is shutting down (its kubelet stops its pods)"
    silent = node(ready="False", since="2030-01-01T11:59:59Z", message="container runtime is down")
    view = classify(running(POD), NOW, {"gpu-node-1": node_view(silent)})
    assert (view.state, view.node_silent) == (PodState.READY, True)


def test_the_trainers_json_termination_message_gives_the_reason_and_message() -> None:
    saved = '{"reason": "PreemptedCheckpointSaved", "message": "stopped and saved after step 7", "step": 7}'
    view = classify(exited(POD, 1, message=saved), NOW)
    assert (view.reason, view.message, view.exit_code) == (
        "PreemptedCheckpointSaved",
        "stopped and saved after step 7",
        1,
    )
    for plain in ("Traceback ...\nValueError: 3", "[1, 2]", '"text"'):
        assert classify(exited(POD, 1, message=plain), NOW).message == plain
