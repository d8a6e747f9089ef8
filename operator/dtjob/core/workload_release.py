"""When dtjob's finalizer (`kueue.x-k8s.io/resource-in-use`) comes off a Workload that is being deleted.

Kueue counts a Workload's quota until the Workload is gone. Deleted with its job (the garbage collector
takes both at once), it would be gone while the job's pods still run down: trainers saving a checkpoint
in their grace period, on GPUs Kueue has already handed to the next gang. The finalizer keeps the
Workload, and its quota, until no pod of the job holds resources, as Kueue's pod-group integration waits
for its last pod. A Workload that holds no quota, or that Kueue counts finished, has nothing to keep.
Pure: the runtime (runtime/release.py) reads the pods and writes the patch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dtjob.core.kueue import RESOURCE_IN_USE
from dtjob.core.observed import owned_by
from dtjob.core.workload_match import holds_quota

# A pod in these phases has stopped its containers: the kubelet has handed its resources back.
_ENDED_PHASES = ("Succeeded", "Failed")


def being_deleted(workload: Mapping[str, Any]) -> bool:
    return bool(workload["metadata"].get("deletionTimestamp"))


def holds_finalizer(workload: Mapping[str, Any]) -> bool:
    return RESOURCE_IN_USE in (workload["metadata"].get("finalizers") or [])


def pods_holding_resources(workload: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The pods of the Workload's job (by its owner's uid, not a namesake's) that have not ended."""
    owners = [ref.get("uid", "") for ref in workload["metadata"].get("ownerReferences") or []]
    return sorted(
        pod["metadata"]["name"]
        for pod in pods
        if any(owned_by(pod, uid) for uid in owners)
        and (pod.get("status") or {}).get("phase") not in _ENDED_PHASES
    )


def finalizer_release(
    workload: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The merge patch that takes dtjob's finalizer off the Workload (onto the version read: a newer one
    is decided again), or None while it must stay: the Workload is not being deleted, or it holds
    quota, is not finished, and a pod of its job still holds resources."""
    if not (being_deleted(workload) and holds_finalizer(workload)):
        return None
    conditions = (workload.get("status") or {}).get("conditions") or []
    finished = any(c.get("type") == "Finished" and c.get("status") == "True" for c in conditions)
    if holds_quota(workload) and not finished and pods_holding_resources(workload, pods):
        return None
    meta = workload["metadata"]
    kept = [f for f in meta.get("finalizers") or [] if f != RESOURCE_IN_USE]
    return {
        "metadata": {"name": meta["name"], "resourceVersion": meta["resourceVersion"], "finalizers": kept}
    }
