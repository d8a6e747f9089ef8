"""Tier C: real pods from an image built from a Dockerfile in the repo, real DNS, real Service routing."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster import Cluster, images
from localcluster.layout import HERE
from localcluster.node import NODE_LABEL
from tests.waiting import wait_for

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
