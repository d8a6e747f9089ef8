"""The GPUDirect-TCPXO daemon's readiness: its startup probe holds the trainer back, and a daemon that
never becomes ready is its node's fault (a preemption that keeps the next attempts off the node), not the
training code's."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from dtjob.core.gke import DAEMON_NOT_READY_RESTARTS
from dtjob.core.observed import PodState, classify, pod_essentials
from tests.support.builders import NOW, SHARED_CHECKPOINTS, manifest, pods_of, running
from tests.support.plan import after, plan_for

TCPXO_NETWORKS = frozenset(f"vpc{i}" for i in range(1, 9))


def tcpxo_job() -> dict[str, Any]:
    return manifest(
        ("Worker", 2),
        accelerator={"type": "nvidia-h100-mega-80gb", "count": 8},
        nccl={"profile": "GPUDirectTCPXO"},
        checkpoint=SHARED_CHECKPOINTS,
    )


def daemon_failing(pod: dict[str, Any], restarts: int, started: bool = False) -> dict[str, Any]:
    """Pending on its node, the daemon sidecar restarted `restarts` times, its startup probe not passed."""
    pod = copy.deepcopy(pod)
    pod["spec"]["nodeName"] = "gpu-node-7"
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}} if restarts else {"running": {}}
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "initContainerStatuses": [
            {
                "name": "tcpxo-daemon",
                "image": "tcpgpudmarxd-dev:v1.0.21",
                "state": waiting,
                "started": started,
                "restartCount": restarts,
                "ready": False,
            },
        ],
        "containerStatuses": [{"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}],
    }
    return pod


def test_a_daemon_that_keeps_failing_its_startup_probe_is_its_nodes_fault() -> None:
    pod = pods_of(tcpxo_job())["mnist-worker-1"]
    assert classify(daemon_failing(pod, 0), NOW).state == PodState.PENDING
    assert classify(daemon_failing(pod, DAEMON_NOT_READY_RESTARTS - 1), NOW).state == PodState.PENDING
    # Started in the end (a slow start, restarted once or twice): the node is fine.
    assert (
        classify(daemon_failing(pod, DAEMON_NOT_READY_RESTARTS, started=True), NOW).state == PodState.PENDING
    )
    bad = classify(daemon_failing(pod, DAEMON_NOT_READY_RESTARTS), NOW)
    assert (bad.state, bad.reason) == (PodState.PREEMPTED, "DaemonNotReady")
    assert bad.message.startswith("the GPUDirect daemon tcpxo-daemon never became ready on node gpu-node-7")
    # What the watch cache keeps of the pod is enough to judge it.
    assert classify(pod_essentials(daemon_failing(pod, 3)), NOW).reason == "DaemonNotReady"


def test_the_gang_restarts_off_the_node_whose_daemon_never_became_ready() -> None:
    job = tcpxo_job()
    job = after(job, plan_for(job, [], NOW, networks=TCPXO_NETWORKS))
    pods = pods_of(job)
    children = [running(pods["mnist-worker-0"]), daemon_failing(pods["mnist-worker-1"], 2)]
    plan = plan_for(job, children, NOW + timedelta(minutes=4))
    job = after(job, plan)
    status = job["status"]
    # Charged as a preemption (the platform's fault), not to backoffLimit.
    assert (status["attempt"], status["restarts"]) == (2, {"failures": 0, "preemptions": 1, "total": 1})
    assert status["avoidedNodes"] == ["gpu-node-7"]
    assert status["lastRestart"]["message"].endswith("the next attempts keep off node gpu-node-7")
    assert "DaemonNotReady" in status["lastRestart"]["message"]
    # The next attempt's pods are kept off it.
    recreate = plan_for(job, [], NOW + timedelta(minutes=4, seconds=1), networks=TCPXO_NETWORKS)
    affinity = recreate.create[0]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-node-7"]} in terms[0]["matchFields"]
