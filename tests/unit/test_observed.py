"""Classifying one pod: what Kubernetes reports, mapped to what the gang policy needs to know."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob.api import Role
from dtjob.observed import PodState, classify, observe
from tests.unit.builders import deleting, exited, manifest, pending, pods_of, preempted, running, service_of

JOB = manifest(("Master", 1), ("Worker", 1))
POD = pods_of(JOB)["mnist-worker-0"]


def failed_with_status_reason(reason: str) -> dict[str, Any]:
    pod = exited(POD, 137)
    pod["status"]["reason"] = reason
    return pod


@pytest.mark.parametrize(
    ("pod", "state", "reason"),
    [
        pytest.param(pending(POD), PodState.PENDING, "", id="a pod not yet scheduled is pending"),
        pytest.param(pending(POD, unschedulable=True), PodState.PENDING, "Unschedulable", id="an unschedulable pod is pending and says why"),
        pytest.param(running(POD, ready=False), PodState.RUNNING, "", id="a running pod that is not ready is running"),
        pytest.param(running(POD), PodState.READY, "", id="a running ready pod is ready"),
        pytest.param(exited(POD, 0), PodState.SUCCEEDED, "Completed", id="a pod whose trainer exited 0 succeeded"),
        pytest.param(exited(POD, 1, message="CUDA error"), PodState.FAILED, "Error", id="a trainer that exited 1 failed"),
        pytest.param(exited(POD, 137, reason="OOMKilled"), PodState.FAILED, "OOMKilled", id="an out-of-memory kill is a failure"),
        pytest.param(preempted(POD), PodState.PREEMPTED, "TerminationByKubelet", id="a node shutdown is a preemption"),
        pytest.param(preempted(POD, "PreemptionByScheduler"), PodState.PREEMPTED, "PreemptionByScheduler",
                     id="scheduler preemption is a preemption"),
        pytest.param(preempted(POD, "EvictionByEvictionAPI"), PodState.PREEMPTED, "EvictionByEvictionAPI", id="a drain is a preemption"),
        pytest.param(preempted(POD, "DeletionByPodGC"), PodState.PREEMPTED, "DeletionByPodGC", id="a pod of a deleted node is a preemption"),
        pytest.param(failed_with_status_reason("Evicted"), PodState.PREEMPTED, "Evicted", id="node-pressure eviction is a preemption"),
        pytest.param(failed_with_status_reason("Terminated"), PodState.PREEMPTED, "Terminated",
                     id="graceful node shutdown without a DisruptionTarget condition is a preemption"),
        pytest.param({**POD, "status": {"phase": "Unknown"}}, PodState.UNKNOWN, "", id="a pod whose node stopped reporting is unknown"),
    ],
)  # fmt: skip
def test_classify(pod: dict[str, Any], state: PodState, reason: str) -> None:
    view = classify(pod)
    assert (view.state, view.reason) == (state, reason)
    assert (view.role, view.index, view.attempt) == (Role.WORKER, 0, 1)


def test_a_failure_carries_the_trainer_exit_code_and_message() -> None:
    view = classify(exited(POD, 3, message="loss is NaN"))
    assert (view.exit_code, view.message, view.node) == (3, "loss is NaN", "gpu-node-1")


def test_a_running_pod_on_a_node_that_is_gone_is_preempted_when_nodes_are_known() -> None:
    pod = running(POD)
    assert classify(pod).state == PodState.READY
    lost = classify(pod, nodes={"other-node"})
    assert (lost.state, lost.reason, lost.node_lost) == (PodState.PREEMPTED, "NodeLost", True)
    assert classify(pod, nodes={"gpu-node-1"}).state == PodState.READY


def test_observe_groups_pods_by_attempt_and_finds_the_service() -> None:
    old = deleting(running(pods_of(JOB, attempt=1)["mnist-worker-0"]))
    new = [running(p) for p in pods_of(JOB, attempt=2).values()]
    observed = observe([old, service_of(JOB), *new])
    assert observed.service is not None and observed.service["metadata"]["name"] == "mnist"
    assert [p.name for p in observed.of_attempt(2)] == ["mnist-master-0", "mnist-worker-0"]
    assert [(p.name, p.terminating) for p in observed.not_of_attempt(2)] == [("mnist-worker-0", True)]
