"""Tier B: kwok plays the kubelet for fake GKE GPU nodes; the real scheduler places pods on them."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from localcluster import Cluster, fakenodes, sim
from tests.support.jobs import OWN_NODE_TAINT, OWN_NODE_TOLERATION
from tests.support.waiting import wait_for

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_pod(name: str, tolerate: bool = True, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
            "tolerations": [GPU_TOLERATION] if tolerate else [],
            "containers": [
                {
                    "name": "trainer",
                    "image": "localhost/none:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }


# Every kwok node Ready: other tests' own nodes may be silenced at the time.
@pytest.mark.cluster_wide
def test_two_hundred_fake_gpu_nodes_are_ready_with_gke_labels_taints_and_gpu_capacity(
    cluster_b: Cluster, core: client.CoreV1Api
) -> None:
    nodes = core.list_node(label_selector="type=kwok").items
    assert len(nodes) >= 200
    ready = [
        n for n in nodes if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
    ]
    assert len(ready) == len(nodes)
    leases = client.CoordinationV1Api(core.api_client).list_namespaced_lease("kube-node-lease").items
    durations = {lease.metadata.name: lease.spec.lease_duration_seconds for lease in leases}
    assert {durations.get(n.metadata.name) for n in nodes} == {fakenodes.LEASE_SECONDS}, (
        "kwok renews each Lease"
    )
    node = nodes[0]
    assert node.metadata.labels["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert {"key": "nvidia.com/gpu", "effect": "NoSchedule"} in [
        {"key": t.key, "effect": t.effect} for t in node.spec.taints
    ]
    spot = [n for n in nodes if n.metadata.labels.get("cloud.google.com/gke-spot") == "true"]
    assert spot, "some fake nodes are spot nodes"
    assert any(t.key == "cloud.google.com/gke-spot" for t in spot[0].spec.taints)


def test_a_pod_asking_for_eight_gpus_is_scheduled_only_with_the_gpu_toleration(
    cluster_b: Cluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, gpu_pod("tolerates"))
    core.create_namespaced_pod(namespace, gpu_pod("intolerant", tolerate=False))
    running = wait_for(lambda: _phase(core, namespace, "tolerates") == "Running" and
                       core.read_namespaced_pod("tolerates", namespace), "the tolerating pod to run")  # fmt: skip
    assert running.spec.node_name.startswith("gke-nvidia-h100-80gb-")

    def unschedulable() -> bool:
        pod = core.read_namespaced_pod("intolerant", namespace)
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or []
        )

    wait_for(unschedulable, "the scheduler to mark the intolerant pod Unschedulable")
    pod = core.read_namespaced_pod("intolerant", namespace)
    assert pod.status.phase == "Pending"
    assert "untolerated taint" in next(c.message for c in pod.status.conditions if c.type == "PodScheduled")


def test_a_pod_the_test_makes_fail_shows_the_chosen_exit_code(
    cluster_b: Cluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, gpu_pod("worker"))
    wait_for(lambda: _phase(core, namespace, "worker") == "Running", "the pod to run")
    sim.exit_pod(core, namespace, "worker", exit_code=3)
    wait_for(lambda: _phase(core, namespace, "worker") == "Failed", "the pod to fail")
    terminated = core.read_namespaced_pod("worker", namespace).status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")


def test_a_pod_the_test_makes_succeed_is_succeeded_with_exit_code_zero(
    cluster_b: Cluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, gpu_pod("worker"))
    wait_for(lambda: _phase(core, namespace, "worker") == "Running", "the pod to run")
    sim.exit_pod(core, namespace, "worker", exit_code=0)
    wait_for(lambda: _phase(core, namespace, "worker") == "Succeeded", "the pod to succeed")


def test_a_pod_disrupted_like_a_spot_preemption_carries_the_disruption_target_condition(
    cluster_b: Cluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, gpu_pod("worker"))
    wait_for(lambda: _phase(core, namespace, "worker") == "Running", "the pod to run")
    sim.preempt_pod(core, namespace, "worker")
    wait_for(lambda: _phase(core, namespace, "worker") == "Failed", "the pod to be terminated")
    status = core.read_namespaced_pod("worker", namespace).status
    assert status.reason == "Terminated"
    target = next(c for c in status.conditions if c.type == "DisruptionTarget")
    assert (target.status, target.reason) == ("True", "TerminationByKubelet")


def test_deleting_a_fake_node_makes_pod_gc_fail_its_pods(
    cluster_b: Cluster, core: client.CoreV1Api, namespace: str
) -> None:
    node = sim.add_gpu_node(cluster_b, index=900, extra_taints=(OWN_NODE_TAINT,))
    pod = gpu_pod("stranded")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod["spec"]["tolerations"].append(OWN_NODE_TOLERATION)
    core.create_namespaced_pod(namespace, pod)
    wait_for(lambda: _phase(core, namespace, "stranded") == "Running", "the pod to run on the doomed node")
    core.delete_node(node)

    def collected() -> bool:
        try:
            pod = core.read_namespaced_pod("stranded", namespace)
        except client.ApiException as err:
            return err.status == 404
        return any(
            c.type == "DisruptionTarget" and c.reason == "DeletionByPodGC"
            for c in pod.status.conditions or []
        )

    # PodGC waits out a 40 s quarantine before it collects pods of a node that no longer exists.
    wait_for(collected, "PodGC to collect the pod of the deleted node", timeout=120)


def _phase(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, namespace).status.phase)
