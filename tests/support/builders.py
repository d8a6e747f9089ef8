"""Plain-dict builders for unit tests: job manifests as the apiserver returns them, and pods as the
operator renders them with the status a kubelet would report."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from dtjob.core.gke import PROFILES
from dtjob.core.preflight import PREFLIGHT_CONTAINER
from dtjob.core.render import render_children

NOW = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
UID = "11111111-2222-3333-4444-555555555555"


def container(name: str = "trainer", image: str = "trainer:1", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


# A checkpoint volume every pod mounts (without one, a gang of several pods is warned it cannot resume).
SHARED_CHECKPOINTS = {"volume": {"persistentVolumeClaim": {"claimName": "checkpoints"}}}


def template(*containers: dict[str, Any], **pod_spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": list(containers) or [container()], **pod_spec}}


def manifest(
    *replicas: tuple[str, int] | dict[str, Any], framework: str = "PyTorch", name: str = "mnist", **spec: Any
) -> dict[str, Any]:
    """A stored job: metadata with namespace, uid and generation, and a spec (replicas as (role, count))."""
    items = [
        r if isinstance(r, dict) else {"role": r[0], "count": r[1], "template": template()} for r in replicas
    ]
    return {
        "apiVersion": "training.dtjob.io/v1alpha1",
        "kind": "DistributedTrainingJob",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": UID,
            "generation": 1,
            "creationTimestamp": "2030-01-01T11:00:00Z",
        },
        "spec": {
            "framework": framework,
            "replicas": items or [{"role": "Worker", "count": 2, "template": template()}],
            **spec,
        },
    }


def with_status(job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {**job, "status": status}


# Every Network object the GPUDirect profiles attach to: a GKE cluster set up as Google's guides do.
GKE_NETWORKS = frozenset(network for profile in PROFILES.values() for network in profile.networks)


def merged(stored: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) applied as the apiserver applies it: null deletes, objects merge,
    anything else replaces."""
    result = dict(stored)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merged(result[key] if isinstance(result.get(key), dict) else {}, value)
        else:
            result[key] = value
    return result


def pods_of(job: dict[str, Any], attempt: int = 1) -> dict[str, dict[str, Any]]:
    """The job's rendered pods by name, as created (no status yet)."""
    rendered = [c for c in render_children(job, attempt) if c["kind"] == "Pod"]
    for i, pod in enumerate(rendered):
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}-{attempt}-{i}"
        pod["metadata"]["creationTimestamp"] = "2030-01-01T11:59:00Z"
    return {p["metadata"]["name"]: p for p in rendered}


def service_of(job: dict[str, Any]) -> dict[str, Any]:
    return render_children(job, 1)[0]


def _with(pod: dict[str, Any], status: dict[str, Any], node: str | None = "gpu-node-1") -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = status
    return pod


def pending(pod: dict[str, Any], unschedulable: bool = False) -> dict[str, Any]:
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}  # fmt: skip
    return _with(pod, {"phase": "Pending", "conditions": [condition] if unschedulable else []}, node=None)


def running(pod: dict[str, Any], ready: bool = True) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return _with(pod, {"phase": "Running", "conditions": conditions,
                       "containerStatuses": [{"name": "trainer", "state": {"running": {}}}]})  # fmt: skip


def exited(
    pod: dict[str, Any],
    exit_code: int,
    reason: str | None = None,
    message: str = "",
    finished: str | None = None,
) -> dict[str, Any]:
    terminated = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "message": message,
        **({"finishedAt": finished} if finished else {}),
    }
    return _with(pod, {"phase": "Succeeded" if exit_code == 0 else "Failed",
                       "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}]})  # fmt: skip


def preempted(pod: dict[str, Any], reason: str = "TerminationByKubelet") -> dict[str, Any]:
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": reason,
                  "message": "Pod was terminated in response to imminent node shutdown."}  # fmt: skip
    terminated = {"exitCode": 143, "reason": "Error"}
    return _with(pod, {"phase": "Failed", "reason": "Terminated", "conditions": [disruption],
                       "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}]})  # fmt: skip


def deleting(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = "2030-01-01T11:59:30Z"
    return pod


def deleted_at(pod: dict[str, Any], when: str) -> dict[str, Any]:
    """Being deleted, its grace period running out at `when` (the deletionTimestamp)."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = when
    return pod


def disrupted_while_running(pod: dict[str, Any], reason: str) -> dict[str, Any]:
    """Still running, with the DisruptionTarget condition an eviction or the taint manager sets first."""
    pod = running(pod)
    disruption = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": reason,
        "message": "Eviction API: evicting",
    }
    pod["status"]["conditions"].append(disruption)
    return pod


def pulling(pod: dict[str, Any], reason: str, scheduled: str = "2030-01-01T11:59:00Z") -> dict[str, Any]:
    """Scheduled at `scheduled`, its trainer waiting on an image error."""
    waiting = {"reason": reason, "message": 'Back-off pulling image "trainer:1"'}
    return _with(pod, {"phase": "Pending",
                       "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}],
                       "containerStatuses": [{"name": "trainer", "image": "trainer:1", "state": {"waiting": waiting}}]})  # fmt: skip


def preflight_outcome(reason: str, busbw: float = 41.25, transport: str = "GPUDirectTCPX_v7") -> str:
    """The termination message the trainer runtime's preflight writes (dtjob_trainer.preflight)."""
    figure = f"all-reduce busbw {busbw} GB/s at 64 MiB over 2 ranks, transport {transport}"
    return json.dumps({"reason": reason, "message": figure, "busBandwidthGbps": busbw, "algBandwidthGbps": busbw,
                       "sizeBytes": 64 << 20, "transport": transport, "backend": "nccl", "worldSize": 2,
                       "seconds": 4.5})  # fmt: skip


def preflight_ended(pod: dict[str, Any], exit_code: int, message: str) -> dict[str, Any]:
    """Its dtj-preflight init container ended with `exit_code`: passed, the trainer runs; else the pod failed."""
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "message": message,
    }
    status = {"name": PREFLIGHT_CONTAINER, "state": {"terminated": terminated}}
    if exit_code == 0:
        pod = running(pod)
        pod["status"]["initContainerStatuses"] = [status]
        return pod
    pod = running(pod)
    pod["status"] = {"phase": "Failed", "initContainerStatuses": [status],
                     "containerStatuses": [{"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}]}  # fmt: skip
    return pod


# The kubelet's Ready condition while its graceful node shutdown runs (a Spot VM's reclaim notice).
SHUTTING_DOWN = "node is shutting down"


def node(
    name: str = "gpu-node-1", ready: str = "True", since: str = "2030-01-01T11:00:00Z", message: str = ""
) -> dict[str, Any]:
    """A Node whose Ready condition has had status `ready` since `since` (not Ready: with `message`, as
    its kubelet says it; else as the node lifecycle controller does when the kubelet went silent)."""
    condition = {"type": "Ready", "status": ready, "lastTransitionTime": since,
                 "reason": "KubeletReady" if ready == "True" else "KubeletNotReady" if message else "NodeStatusUnknown",
                 "message": "" if ready == "True" else message or "Kubelet stopped posting node status."}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"conditions": [condition]},
    }
