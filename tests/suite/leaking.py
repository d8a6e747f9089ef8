"""Two toy Kueue tests, run by `tests/integration/test_kueue.py` in a pytest process of its own against the
real cluster (never collected by the suite: the file name is not a test module's). The first one's
fixture leaves what a broken fixture leaves: a fake node open to other tests' pods (no reserving taint,
not cordoned) and an admitted Workload outside its namespace, which under `blockAdmission` holds every
later admission. The hygiene check after it (tests/conftest.py) must fail it and clear both, so that the
second, which needs a clean cluster, passes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dtjob.core import kueue
from localcluster import Cluster, Tier, fakenodes, sim
from tests.support.kueue import kueue_objects
from tests.support.tiers import at_tier
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kueue

# Set by the test that runs this file: the names its leaks take, so that it can look for them after.
NODE_INDEX = int(os.environ.get("DTJOB_LEAKING_NODE_INDEX", "10000"))
NAME = os.environ.get("DTJOB_LEAKING_NAME", "leaking")
NAMESPACE = "default"
# Not a reserving taint (tests/support/hygiene.py): the check counts the node open, while the other tests
# running beside this one (the suite's shared part) tolerate it no more than they do any GPU node's.
TOY_TAINT = {"key": "test.dtjob.io/toy", "value": "true", "effect": "NoSchedule"}


def workload() -> dict[str, Any]:
    container = {"name": "c", "image": "toy", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": f"{kueue.GROUP}/{kueue.VERSION}",
        "kind": "Workload",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "finalizers": [kueue.RESOURCE_IN_USE]},
        "spec": {
            "queueName": NAME,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}],
        },
    }


def admitted(objects: client.CustomObjectsApi) -> bool:
    found = objects.get_namespaced_custom_object(kueue.GROUP, kueue.VERSION, NAMESPACE, kueue.WORKLOADS, NAME)
    conditions = found.get("status", {}).get("conditions", [])
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)


@pytest.fixture
def leaky(local_cluster: Cluster, objects: client.CustomObjectsApi) -> Iterator[None]:
    """Its own queue and a Workload admitted to it, and a fake node; it takes back the queues only."""
    cluster = at_tier(local_cluster, Tier.B)
    sim.add_gpu_node(cluster, NODE_INDEX, extra_taints=(TOY_TAINT,))
    apply = kueue_objects(objects)
    apply("resourceflavors", {"apiVersion": f"{kueue.GROUP}/v1beta1", "kind": "ResourceFlavor",
                              "metadata": {"name": NAME}})  # fmt: skip
    apply("clusterqueues", {
        "apiVersion": f"{kueue.GROUP}/v1beta1", "kind": "ClusterQueue", "metadata": {"name": NAME},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                 "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                     {"name": NAME, "resources": [{"name": "cpu", "nominalQuota": 1}]}]}]},
    })  # fmt: skip
    apply("localqueues", {"apiVersion": f"{kueue.GROUP}/v1beta1", "kind": "LocalQueue",
                          "metadata": {"name": NAME, "namespace": NAMESPACE},
                          "spec": {"clusterQueue": NAME}}, NAMESPACE)  # fmt: skip
    objects.create_namespaced_custom_object(
        kueue.GROUP, kueue.VERSION, NAMESPACE, kueue.WORKLOADS, workload()
    )
    wait_for(lambda: admitted(objects), f"Workload {NAMESPACE}/{NAME} admitted")
    yield
    # The queues go (each waits on Kueue's finalizer while the Workload holds them); the rest is left.
    objects.delete_namespaced_custom_object(kueue.GROUP, "v1beta1", NAMESPACE, "localqueues", NAME)
    objects.delete_cluster_custom_object(kueue.GROUP, "v1beta1", "clusterqueues", NAME)
    objects.delete_cluster_custom_object(kueue.GROUP, "v1beta1", "resourceflavors", NAME)


def test_a_fixture_leaves_a_node_open_and_a_workload_admitted(leaky: None) -> None:
    pass


def test_the_next_test_finds_the_cluster_clean(
    local_cluster: Cluster, core: client.CoreV1Api, objects: client.CustomObjectsApi
) -> None:
    at_tier(local_cluster, Tier.B)
    nodes = [n.metadata.name for n in core.list_node().items]
    assert fakenodes.gpu_node(NODE_INDEX)["metadata"]["name"] not in nodes
    workloads = objects.list_namespaced_custom_object(kueue.GROUP, kueue.VERSION, NAMESPACE, kueue.WORKLOADS)
    assert [w["metadata"]["name"] for w in workloads["items"] if w["metadata"]["name"] == NAME] == []
