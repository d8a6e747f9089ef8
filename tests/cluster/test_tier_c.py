"""Tier C: real pods from an image built from a Dockerfile in the repo, real DNS, real Service routing."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from kubernetes import client

from localcluster import Cluster
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
