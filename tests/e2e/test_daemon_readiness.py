"""The GPUDirect-TCPXO daemon's startup probe holds the NCCL preflight and the trainer back (tier C, the
real kubelet): a pod rendered by the operator for an A3 Mega job, its daemon sidecar (probe, env and place
among the init containers exactly as rendered) played by a stand-in that, like the real daemon, writes
$HEALTH_CHECK_LOG_FILE once it has initialised, 20 s after it starts. The local node has no GPUs, so the
pod keeps only what the kubelet needs to run it there, or on any CPU node (CLUSTER=current): no GPU
requests, node selection, host paths or network annotations; the preflight and the trainer only print
when they start."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from dtjob.core.gke import HEALTH_CHECK_FILE
from dtjob.core.preflight import PREFLIGHT_CONTAINER
from dtjob.core.render import render_children
from hack import images
from localcluster import Cluster
from tests.support.builders import manifest
from tests.support.waiting import wait_for

INITIALISING_SECONDS = 20
STANDIN = f'sleep {INITIALISING_SECONDS}; echo "Buffer manager initialization completed." > "$HEALTH_CHECK_LOG_FILE"; sleep 3600'


def rendered_tcpxo_pod(namespace: str) -> dict[str, Any]:
    job = manifest(
        ("Worker", 2),
        accelerator={"type": "nvidia-h100-mega-80gb", "count": 8},
        nccl={"profile": "GPUDirectTCPXO", "preflight": {"enabled": True}},
    )
    job["metadata"]["namespace"] = namespace
    return next(
        c for c in render_children(job, 1) if c["kind"] == "Pod" and c["metadata"]["name"].endswith("-0")
    )


def runnable_here(pod: dict[str, Any], image: str) -> dict[str, Any]:
    """The rendered pod as the CPU node can run it (see the module's docstring)."""
    pod = copy.deepcopy(pod)
    meta, spec = pod["metadata"], pod["spec"]
    meta.pop("ownerReferences", None)
    meta["annotations"] = {}
    meta["name"] = "tcpxo-readiness"
    for key in ("nodeSelector", "tolerations", "affinity", "volumes", "hostname", "subdomain"):
        spec.pop(key, None)
    spec["restartPolicy"] = "Never"
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        container.pop("volumeMounts", None)
        container.pop("resources", None)
        container["image"], container["imagePullPolicy"] = image, "IfNotPresent"
        if container["name"] == "tcpxo-daemon":
            container["command"], container["args"] = ["sh", "-c"], [STANDIN]
            container["securityContext"] = {"runAsUser": 0}  # it writes under /run, as the daemon does
        else:
            container["command"], container["args"] = ["sh", "-c"], ["date +%s"]
    return pod


def started_at(pod: client.V1Pod, name: str) -> datetime:
    statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
    state = next(s.state for s in statuses if s.name == name)
    moment = (state.running or state.terminated).started_at
    assert moment is not None, name
    return moment


@pytest.mark.any_cluster
def test_the_preflight_and_the_trainer_start_only_once_the_tcpxo_daemon_is_ready(
    cluster_c: Cluster, core: client.CoreV1Api, namespace: str
) -> None:
    image = images.deliver(cluster_c, images.TORCH_TRAINER)
    rendered = rendered_tcpxo_pod(namespace)
    names = [c["name"] for c in rendered["spec"]["initContainers"]]
    assert names.index("tcpxo-daemon") < names.index(PREFLIGHT_CONTAINER), names
    daemon = next(c for c in rendered["spec"]["initContainers"] if c["name"] == "tcpxo-daemon")
    assert {"name": "HEALTH_CHECK_LOG_FILE", "value": HEALTH_CHECK_FILE} in daemon["env"]
    core.create_namespaced_pod(namespace, runnable_here(rendered, image))

    pod = wait_for(
        lambda: (
            (p := core.read_namespaced_pod("tcpxo-readiness", namespace)).status.phase == "Succeeded" and p
        ),
        "the pod to run to its end",
        timeout=120,
    )
    waited = (started_at(pod, PREFLIGHT_CONTAINER) - started_at(pod, "tcpxo-daemon")).total_seconds()
    assert waited >= INITIALISING_SECONDS, f"the preflight started {waited:.0f}s after the daemon"
    assert started_at(pod, "trainer") >= started_at(pod, PREFLIGHT_CONTAINER)
