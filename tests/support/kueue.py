"""A job in a Kueue queue in unit tests and benches: the job (JOB, QUEUED: the same in a LocalQueue) and
its Workload as Kueue leaves it; and a job's Workload found in a cluster."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from dtjob.core import kueue
from dtjob.core.names import JOB_NAME_LABEL
from tests.support.builders import NOW, SHARED_CHECKPOINTS, manifest
from tests.support.plan import plan_for

ACCELERATOR = {"type": "nvidia-h100-80gb", "count": 8}
JOB = manifest(
    ("Master", 1),
    ("Worker", 2),
    checkpoint=SHARED_CHECKPOINTS,
    accelerator=ACCELERATOR,
    nccl={"profile": "TCP"},
)
QUEUED = {**JOB, "metadata": {**JOB["metadata"], "labels": {kueue.QUEUE_LABEL: "team-a-gpus"}}}
# Kueue's ResourceFlavors as a pass reads them: h100, its node pool and a toleration.
FLAVORS = {
    "h100": {
        "metadata": {"name": "h100"},
        "spec": {
            "nodeLabels": {"cloud.google.com/gke-nodepool": "h100-pool"},
            "tolerations": [{"key": "reserved", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
}


def workload(*conditions: tuple[str, str], admission: bool = False, **status: Any) -> dict[str, Any]:
    """The job's Workload as Kueue left it: conditions as (type, status), with the admission to ClusterQueue
    gpus in flavor h100 when `admission`."""
    rendered = plan_for(QUEUED, [], NOW).workload
    assert rendered is not None
    stored: dict[str, Any] = {
        **rendered,
        "metadata": {**rendered["metadata"], "uid": "w-1", "resourceVersion": "7"},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": t, "message": f"{t} is {s}", "lastTransitionTime": "x"}
                for t, s in conditions
            ],
            **status,
        },
    }
    if admission:
        stored["status"]["admission"] = {
            "clusterQueue": "gpus",
            "podSetAssignments": [
                {"name": name, "flavors": {"nvidia.com/gpu": "h100", "cpu": "h100"}, "count": count}
                for name, count in (("master", 1), ("worker", 2))
            ],
        }
    return stored


def workload_of(objects: Any, namespace: str, job: str) -> dict[str, Any]:
    """The Workload of the job named `job` in a cluster (a kubernetes CustomObjectsApi), found by its label
    as the operator names it (kueue.workload_name: a hash of the job's uid); LookupError while it has none."""
    found = objects.list_namespaced_custom_object(
        kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, label_selector=f"{JOB_NAME_LABEL}={job}"
    )["items"]
    if not found:
        raise LookupError(f"no Workload of job {job} yet")
    workload: dict[str, Any] = found[0]
    return workload


def kueue_objects(objects: Any) -> Any:
    """`apply(plural, body, namespace=None)`: create a Kueue object (ResourceFlavor, ClusterQueue, LocalQueue)
    in a cluster through a kubernetes CustomObjectsApi; one that exists already is fine."""

    def apply(plural: str, body: dict[str, Any], namespace: str | None = None) -> None:
        try:
            if namespace:
                objects.create_namespaced_custom_object(kueue.GROUP, kueue.VERSION, namespace, plural, body)
            else:
                objects.create_cluster_custom_object(kueue.GROUP, kueue.VERSION, plural, body)
        except client.ApiException as err:
            if err.status != 409:
                raise

    return apply


def release_workloads(objects: Any, namespace: str) -> None:
    """Take the operator's finalizer off the namespace's Workloads, as docs/kueue.md says to by hand: a test's
    operator (watching its namespace only) is stopped before the namespace is deleted."""
    for found in objects.list_namespaced_custom_object(
        kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS
    )["items"]:
        finalizers = found["metadata"].get("finalizers") or []
        if kueue.RESOURCE_IN_USE in finalizers:
            kept = [f for f in finalizers if f != kueue.RESOURCE_IN_USE]
            body = {"metadata": {"finalizers": kept or None}}
            objects.patch_namespaced_custom_object(
                kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, found["metadata"]["name"], body
            )
