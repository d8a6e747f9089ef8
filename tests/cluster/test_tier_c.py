"""Tier C: real pods from an image built from a Dockerfile in the repo, real DNS, real Service routing."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster import Cluster, images
from localcluster.layout import HERE
from localcluster.node import NODE_LABEL, Node
from tests.support.hygiene import SECOND_NODE_TAINT, SECOND_NODE_TOLERATION
from tests.support.sharing import one_worker_at_a_time
from tests.support.waiting import wait_for

PROBE_CONTEXT = HERE / "images" / "probe"


@pytest.fixture
def probe_image(cluster_c: Cluster) -> str:
    """The probe image, built with buildah from its Dockerfile; tagged by content so edits rebuild it.
    Built into the real node's containerd, so after tier C is up."""
    local_cluster = cluster_c
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(PROBE_CONTEXT.iterdir()))).hexdigest()[
        :12
    ]
    image = f"localhost/dtjob-probe:{digest}"
    with one_worker_at_a_time("probe-image"):  # one builds it, the others find it
        if not local_cluster.node.has_image(image):
            local_cluster.build_image(PROBE_CONTEXT, image)
    return image


def probe_pod(name: str, image: str, args: list[str], subdomain: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "probe"}},
        "spec": {
            "restartPolicy": "Never",
            "hostname": name,
            **({"subdomain": subdomain} if subdomain else {}),
            "nodeSelector": {NODE_LABEL: "true"},
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "args": args,
                    # Never Ready: the peers must find each other through DNS all the same.
                    "readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1},
                }
            ],
        },
    }


def finished_log(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 120) -> str:
    phase = wait_for(
        lambda: (
            (p := core.read_namespaced_pod(name, namespace).status.phase) in ("Succeeded", "Failed") and p
        ),
        f"pod {name} to finish",
        timeout=timeout,
    )
    log = core.read_namespaced_pod_log(name, namespace)
    assert phase == "Succeeded", f"pod {name} {phase}: {log}"
    return log


def test_two_unready_pods_behind_a_headless_service_resolve_each_other_and_talk_tcp(
    cluster_c: Cluster, core: client.CoreV1Api, namespace: str, probe_image: str
) -> None:
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "peers"},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"app": "probe"},
                     "ports": [{"name": "probe", "port": 7000}]},
        },
    )  # fmt: skip
    core.create_namespaced_pod(
        namespace, probe_pod("peer-0", probe_image, ["pair", "peer-1.peers", "7000", "90"], "peers")
    )
    core.create_namespaced_pod(
        namespace, probe_pod("peer-1", probe_image, ["pair", "peer-0.peers", "7000", "90"], "peers")
    )
    for me, other in (("peer-0", "peer-1"), ("peer-1", "peer-0")):
        answer = json.loads(finished_log(core, namespace, me).strip().splitlines()[-1])
        assert answer["answer"] == other
        assert answer["addr"] == core.read_namespaced_pod(other, namespace).status.pod_ip
    # Neither pod was ever Ready: the names resolved only because of publishNotReadyAddresses.
    for name in ("peer-0", "peer-1"):
        conditions = core.read_namespaced_pod(name, namespace).status.conditions
        assert not any(c.type == "Ready" and c.status == "True" for c in conditions)


def test_a_pod_reaches_the_apiserver_through_the_kubernetes_service(
    cluster_c: Cluster, core: client.CoreV1Api, namespace: str, probe_image: str
) -> None:
    core.create_namespaced_pod(
        namespace,
        probe_pod("to-apiserver", probe_image, ["https", "https://kubernetes.default.svc/version", "30"]),
    )
    assert json.loads(finished_log(core, namespace, "to-apiserver"))["status"] == 200


def test_an_image_imported_again_under_its_tag_leaves_no_copy_of_the_old_content(
    cluster_c: Cluster, tmp_path: Path
) -> None:
    """The CRI plugin references every image it sees by its ID as well: a rebuilt image that takes the tag
    must not leave the old one's content behind (each torch rebuild kept 12 GB until the disk filled)."""
    ref, node = "localhost/dtjob-reimported:1", cluster_c.node
    archives = []
    for content in (b"first", b"second"):
        layer = tmp_path / f"{content.decode()}.tar"
        with tarfile.open(layer, "w") as tar:
            info = tarfile.TarInfo("content")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        archives.append(
            images.oci_archive(layer, ref, tmp_path / f"{content.decode()}.oci.tar", ["/content"])
        )
    node.import_image(archives[0])
    first = node.image_targets()[ref]
    # The ID reference is added when the CRI plugin handles the import's event: wait for it, as a
    # long-imported image has it.
    wait_for(
        lambda: sum(target == first for target in node.image_targets().values()) == 2,
        "the CRI plugin's ID reference to the first import",
    )
    try:
        node.import_image(archives[1])
        targets = node.image_targets()
        assert targets[ref] != first
        assert first not in targets.values(), targets
        assert f"{first}" not in node.ctr("content", "ls", "-q").stdout.split()
    finally:
        node.ctr("images", "rm", "--sync", ref, check=False)


@pytest.fixture
def second_node(cluster_c: Cluster, core: client.CoreV1Api) -> Iterator[Node]:
    """The second real node, up for one test and kept to it: its Node is made before its kubelet starts,
    tainted SECOND_NODE_TAINT, which only this test's pods tolerate (a kubelet keeps the taints of a Node
    that exists when it registers). Stopped after the test, or after a start that failed, its Node object
    and pods gone."""
    node = cluster_c.nodes[1]
    try:
        reserve(core, node.real.name)
        cluster_c.start_node(node)
        yield node
    finally:
        node.stop()
        try:
            core.delete_node(node.real.name)
        except client.ApiException as err:
            if err.status != 404:
                raise
        wait_for(
            lambda: (
                not core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node.real.name}").items
            ),
            f"the pods of {node.real.name} gone with it (pod GC)",
            # PodGC takes a missing node's pods after its 40 s quarantine, on its 20 s pass: up to a minute
            # on an idle machine (59.6 s once on a loaded one, 2026-11-28; then over 60 s).
            timeout=120,
        )


def reserve(core: client.CoreV1Api, name: str) -> None:
    """The Node `name`, tainted SECOND_NODE_TAINT, before its kubelet registers it; labelled as the kubelet
    would (it sets its --node-labels only on a Node it creates itself)."""
    labels = {NODE_LABEL: "true", "kubernetes.io/hostname": name}
    try:
        core.create_node(
            {"metadata": {"name": name, "labels": labels}, "spec": {"taints": [SECOND_NODE_TAINT]}}
        )
    except client.ApiException as err:
        if err.status != 409:
            raise
        # Left by a run that could not delete it: tainted and labelled all the same.
        core.patch_node(name, {"metadata": {"labels": labels}, "spec": {"taints": [SECOND_NODE_TAINT]}})


# A second real node joins the cluster, and is then lost.
@pytest.mark.cluster_wide
def test_a_second_real_node_runs_pods_that_reach_the_first_nodes_and_go_silently_when_it_is_lost(
    cluster_c: Cluster, core: client.CoreV1Api, namespace: str, probe_image: str, second_node: Node
) -> None:
    cluster_c.share_image(probe_image)
    core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "peers"}, "spec": {"clusterIP": "None", "selector": {"app": "probe"}}},
    )
    far = probe_pod("far", probe_image, ["hold-serve", "7000"], "peers")
    near = probe_pod("near", probe_image, ["hold", "far.peers", "7000", "60"], "peers")
    for pod, node in ((far, second_node), (near, cluster_c.node)):
        pod["spec"]["nodeName"] = node.real.name
        pod["spec"]["containers"][0].pop("readinessProbe")  # ready: the headless Service publishes them
    far["spec"]["tolerations"] = [SECOND_NODE_TOLERATION]
    core.create_namespaced_pod(namespace, far)
    wait_for(
        lambda: core.read_namespaced_pod("far", namespace).status.pod_ip, "the far pod's address", timeout=60
    )
    core.create_namespaced_pod(namespace, near)
    # Over the far node's bridge and this machine's routing: the far pod's name resolved, its answer came.
    answer = wait_for(
        lambda: (log := core.read_namespaced_pod_log("near", namespace)) and json.loads(log.splitlines()[0]),
        "the far pod's answer",
        timeout=60,
    )
    far_ip = core.read_namespaced_pod("far", namespace).status.pod_ip
    assert (answer["answer"], answer["addr"]) == ("far", far_ip)
    assert ipaddress.ip_address(far_ip) in ipaddress.ip_network(second_node.real.pod_cidr)

    cluster_c.lose_node(second_node)
    # Its processes died with it (the connection ends), while the API was told nothing.
    closed = json.loads(finished_log(core, namespace, "near", timeout=30).strip().splitlines()[-1])
    assert closed == {"closed": True, "after": ""}
    assert not cluster_c.procs.running(second_node.kubelet)
    assert core.read_namespaced_pod("far", namespace).status.phase == "Running"
    conditions = core.read_node(second_node.real.name).status.conditions
    assert any(c.type == "Ready" and c.status == "True" for c in conditions)


# A second real node joins the cluster, and is then shut down.
@pytest.mark.cluster_wide
def test_a_second_real_nodes_kubelet_shuts_down_gracefully_when_its_logind_says_so(
    cluster_c: Cluster, core: client.CoreV1Api, namespace: str, probe_image: str, second_node: Node
) -> None:
    """What a GKE Spot VM's reclaim notice does to the node's pods, by the real kubelet's graceful node
    shutdown: SIGTERM, then Failed with DisruptionTarget TerminationByKubelet, the node NotReady."""
    cluster_c.share_image(probe_image)
    pod = probe_pod("reclaimed", probe_image, ["serve", "7000"])
    pod["spec"]["nodeName"] = second_node.real.name
    pod["spec"]["tolerations"] = [SECOND_NODE_TOLERATION]
    pod["spec"]["containers"][0].pop("readinessProbe")
    core.create_namespaced_pod(namespace, pod)
    wait_for(
        lambda: core.read_namespaced_pod("reclaimed", namespace).status.phase == "Running",
        "the pod running",
        timeout=60,
    )
    cluster_c.shut_down_node(second_node)
    status = wait_for(
        lambda: (s := core.read_namespaced_pod("reclaimed", namespace).status).phase == "Failed" and s,
        "the pod failed by the node's shutdown",
        timeout=30,
    )
    assert status.reason == "Terminated"
    disruption = next(c for c in status.conditions if c.type == "DisruptionTarget")
    assert (disruption.status, disruption.reason) == ("True", "TerminationByKubelet")
    assert status.container_statuses[0].state.terminated is not None
    wait_for(
        lambda: any(
            c.type == "Ready" and c.status == "False"
            for c in core.read_node(second_node.real.name).status.conditions
        ),
        "the node NotReady",
        timeout=30,
    )
