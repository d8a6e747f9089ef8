"""The hygiene check's rules (tests/support/hygiene.py) over snapshots made by hand: each catches its leak,
the cluster at rest has none, and the running test's own namespace is never one."""

from __future__ import annotations

import copy
import inspect
from dataclasses import replace

import pytest
import yaml

from localcluster import Cluster, fakenodes
from localcluster.layout import REAL_NODES
from tests.support.hygiene import (
    FIRST_NODE,
    FLEET_SIZE,
    SECOND_NODE_TAINT,
    ClusterSnapshot,
    Node,
    Pod,
    at_rest_taints,
    committed_crd_digest,
    crd_digest,
    findings,
    leaks,
)
from tests.support.jobs import OWN_NODE_TAINT
from tests.support.paths import CRD_FILE

RUNNING = "t-test-the-running-one-a1b2c3"
OTHER = "t-test-an-earlier-one-d4e5f6"
GPU = ("nvidia.com/gpu", "present", "NoSchedule")


def taint(raw: dict[str, str]) -> tuple[str, str, str]:
    return (raw["key"], raw["value"], raw["effect"])


def fleet_node(index: int, *extra: tuple[str, str, str]) -> Node:
    """A fake node as localcluster/fakenodes.py makes it: index 0-199 is the fleet's (every fourth a spot
    one), any other a test's own."""
    raw = fakenodes.gpu_node(index, spot=index < FLEET_SIZE and index % 4 == 3)
    taints = tuple(sorted((*map(taint, raw["spec"]["taints"]), *extra)))
    return Node(raw["metadata"]["name"], raw["metadata"]["labels"], taints)


AT_REST = ClusterSnapshot(
    nodes=(
        Node(FIRST_NODE, {"dtjob.io/local-node": "true"}),
        *(fleet_node(i) for i in range(FLEET_SIZE)),
    ),
    priority_classes=(("system-cluster-critical", False), ("system-node-critical", False)),
    crd_digest=committed_crd_digest(),
)


def with_node(node: Node) -> ClusterSnapshot:
    return replace(AT_REST, nodes=(*AT_REST.nodes, node))


@pytest.mark.parametrize("alone", [False, True])
def test_the_cluster_at_rest_has_no_leak(alone: bool) -> None:
    assert findings(AT_REST, None, alone=alone) == []
    assert findings(AT_REST, RUNNING, alone=alone) == []


def test_the_fleet_at_rest_is_the_one_a_tier_brings_up() -> None:
    assert inspect.signature(Cluster.up).parameters["fake_nodes"].default == FLEET_SIZE
    assert len(at_rest_taints()) == FLEET_SIZE + 1
    spot = fleet_node(3).taints
    assert ("cloud.google.com/gke-spot", "true", "NoSchedule") in spot  # every fourth one
    assert findings(replace(AT_REST, nodes=(*AT_REST.nodes[:-1], fleet_node(FLEET_SIZE - 1))), None) == []


def test_a_fake_node_left_open_is_a_leak_and_one_kept_to_its_test_is_not() -> None:
    stray = fleet_node(7123)  # as a test's own, without OWN_NODE_TAINT: any GPU pod may land there
    [line] = findings(with_node(stray), RUNNING)
    assert line.startswith(f"node {stray.name}: not a node of the cluster at rest, and open")
    assert findings(with_node(fleet_node(7123, taint(OWN_NODE_TAINT))), RUNNING) == []
    assert findings(with_node(replace(stray, unschedulable=True)), RUNNING) == []


def test_the_second_real_node_left_untainted_is_a_leak() -> None:
    second = Node(REAL_NODES[1].name, {"dtjob.io/local-node": "true"})
    [line] = findings(with_node(second), None)
    assert line.startswith(f"node {second.name}: ")
    assert findings(with_node(replace(second, taints=(taint(SECOND_NODE_TAINT),))), None) == []
    # Lost (its kubelet gone): the node controller's taints do not keep it to its test.
    unreachable = ("node.kubernetes.io/unreachable", "", "NoSchedule")
    assert len(findings(with_node(replace(second, taints=(unreachable,))), None)) == 1


def test_a_node_of_the_cluster_at_rest_left_cordoned_or_tainted_is_a_leak() -> None:
    first, *fleet = AT_REST.nodes
    cordoned = replace(AT_REST, nodes=(replace(first, unschedulable=True), *fleet))
    assert findings(cordoned, None) == [
        f"node {FIRST_NODE}: cordoned, untainted; at rest schedulable, untainted"
    ]
    termination = ("cloud.google.com/impending-node-termination", "true", "NoSchedule")
    tainted = replace(AT_REST, nodes=(first, fleet_node(0, termination), *fleet[1:]))
    [line] = findings(tainted, None)
    assert line == (
        f"node {fleet[0].name}: schedulable, tainted {termination[0]}, nvidia.com/gpu; "
        "at rest schedulable, tainted nvidia.com/gpu"
    )
    # The node controller's taints come and go by themselves.
    not_ready = ("node.kubernetes.io/not-ready", "", "NoSchedule")
    assert findings(replace(AT_REST, nodes=(replace(first, taints=(not_ready,)), *fleet)), None) == []


def test_webhooks_are_kueues_two_while_kueue_runs_and_none_otherwise() -> None:
    kueues = (
        ("mutating", "kueue-mutating-webhook-configuration"),
        ("validating", "kueue-validating-webhook-configuration"),
    )
    assert findings(replace(AT_REST, webhooks=kueues, kueue_running=True), None) == []
    stopped = findings(replace(AT_REST, webhooks=kueues, kueue_running=False), None)
    assert [line.split(":")[0] for line in stopped] == [
        "mutatingwebhookconfiguration kueue-mutating-webhook-configuration",
        "validatingwebhookconfiguration kueue-validating-webhook-configuration",
    ]
    assert "Kueue is not running" in stopped[0]
    [line] = findings(replace(AT_REST, webhooks=(("validating", "someones-policy"),)), None)
    assert line == (
        "validatingwebhookconfiguration someones-policy: not the cluster's at rest: it intercepts later tests' writes"
    )


def test_a_tests_own_webhook_is_its_until_it_ends_unless_the_check_holds_the_cluster_alone() -> None:
    slow = replace(AT_REST, webhooks=(("validating", f"slow-admission-{OTHER}"),))
    assert findings(slow, RUNNING, alone=False) == []  # another test's, which may still be running
    assert len(findings(slow, RUNNING, alone=True)) == 1
    # The running test's own outlives its namespace: it is a leak of the test that made it.
    assert len(findings(replace(slow, webhooks=(("validating", f"slow-admission-{RUNNING}"),)), RUNNING)) == 1


def test_any_global_default_priority_class_is_a_leak() -> None:
    classes = (*AT_REST.priority_classes, (f"default-{RUNNING}", True), ("high", False))
    assert findings(replace(AT_REST, priority_classes=classes), RUNNING) == [
        f"priorityclass default-{RUNNING}: globalDefault: every later pod gets its priority"
    ]
    assert len(findings(replace(AT_REST, priority_classes=(("cluster-default", True),)), None)) == 1


def test_workloads_but_the_running_tests_are_leaks() -> None:
    workloads = replace(AT_REST, workloads=((RUNNING, "job-a1"), (OTHER, "job-b2")))
    assert findings(workloads, RUNNING) == [
        f"workload {OTHER}/job-b2: left by a test that ended: it may hold quota"
    ]
    assert len(findings(workloads, None)) == 2


def test_a_crd_other_than_the_committed_one_is_a_leak_and_none_installed_is_not() -> None:
    older = yaml.safe_load(CRD_FILE.read_text())
    schema = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    del schema["status"]["properties"]["brokenSince"]  # as tests/integration/test_crd_upgrade.py installs
    [line] = findings(replace(AT_REST, crd_digest=crd_digest(older)), None)
    assert line.startswith(
        "customresourcedefinition distributedtrainingjobs.training.dtjob.io: not the committed"
    )
    assert findings(replace(AT_REST, crd_digest=None), None) == []


def test_the_crd_digest_reads_the_schemas_and_the_revision_as_the_apiserver_returns_them() -> None:
    committed = yaml.safe_load(CRD_FILE.read_text())
    served = copy.deepcopy(committed)
    served["spec"]["names"]["singular"] = "changed"  # not the schema: not looked at
    served["status"] = {"storedVersions": ["v1alpha1"]}
    assert crd_digest(served) == committed_crd_digest()
    older = copy.deepcopy(committed)
    del older["metadata"]["annotations"]["training.dtjob.io/schema-revision"]
    assert crd_digest(older) != committed_crd_digest()
    whole = copy.deepcopy(committed)
    whole["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["maximum"] = 1.0
    as_json = copy.deepcopy(whole)
    as_json["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["maximum"] = 1
    assert crd_digest(whole) == crd_digest(as_json)


def test_live_pods_of_another_tests_namespace_are_a_leak_only_while_the_check_holds_the_cluster_alone() -> (
    None
):
    pods = (
        Pod(RUNNING, "mine-0", "Running"),
        Pod(OTHER, "left-1", "Pending"),
        Pod(OTHER, "left-0", "Running"),
        Pod("kube-system", "coredns", "Running"),
        Pod("kueue-system", "x", "Running"),
    )
    snapshot = replace(AT_REST, pods=pods)
    assert findings(snapshot, RUNNING, alone=True) == [
        f"namespace {OTHER}: a test's, its pods live: left-0 (Running), left-1 (Pending)"
    ]
    assert findings(snapshot, RUNNING, alone=False) == []  # the other tests' pods, beside this one
    assert [leak.name for leak in leaks(snapshot, None, alone=True)] == [OTHER, RUNNING]  # a reset: all


def test_the_running_tests_namespace_is_never_a_finding() -> None:
    mine = replace(
        AT_REST,
        workloads=((RUNNING, "job-a1"),),
        pods=(Pod(RUNNING, "job-a1-worker-0", "Running"), Pod(RUNNING, "job-a1-worker-1", "Pending")),
    )
    for alone in (False, True):
        assert findings(mine, RUNNING, alone=alone) == []
