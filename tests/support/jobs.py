"""The DistributedTrainingJob API in tests and benches: its group, version and plural, `Jobs` (small
helpers over one namespace's jobs and their pods), job manifests for kwok's fake GPU nodes, and the
state of a job's pods and events."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from dtjob.core.names import ATTEMPT_LABEL
from tests.support.waiting import wait_for

GROUP, VERSION, PLURAL = "training.dtjob.io", "v1alpha1", "distributedtrainingjobs"
JOB_LABEL = "training.dtjob.io/job-name"


class Jobs:
    """Small helpers over the DistributedTrainingJob API for one test namespace."""

    def __init__(self, api: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str) -> None:
        self.api, self.core, self.namespace = api, core, namespace

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = self.api.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, manifest
        )
        return created

    def get(self, name: str) -> dict[str, Any]:
        job: dict[str, Any] = self.api.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return job

    def patch(self, name: str, patch: dict[str, Any]) -> None:
        self.api.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name, patch)

    def delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        for c in self.get(name).get("status", {}).get("conditions", []):
            if c["type"] == type_:
                return dict(c)
        return None

    def wait_condition(
        self, name: str, type_: str, status: str = "True", timeout: float = 60
    ) -> dict[str, Any]:
        return wait_for(
            lambda: (c := self.condition(name, type_)) is not None and c["status"] == status and c,
            f"condition {type_}={status} on {name}",
            timeout=timeout,
        )

    def pods(self, name: str) -> list[client.V1Pod]:
        items = self.core.list_namespaced_pod(self.namespace, label_selector=f"{JOB_LABEL}={name}").items
        return sorted((p for p in items if not p.metadata.deletion_timestamp), key=lambda p: p.metadata.name)

    def wait_pods(
        self, name: str, count: int, phase: str | None = None, timeout: float = 60
    ) -> list[client.V1Pod]:
        def ready() -> tuple[list[client.V1Pod]] | None:
            pods = self.pods(name)
            if len(pods) == count and all(phase is None or p.status.phase == phase for p in pods):
                return (pods,)  # a tuple, so that zero pods still counts as reached
            return None

        what = f"{count} pods of {name}" + (f" {phase}" if phase else "")
        return wait_for(ready, what, timeout=timeout)[0]


def pytorch_job(name: str, workers: int = 2, master: bool = False, **spec: Any) -> dict[str, Any]:
    """A PyTorch job for fake GPU nodes (tier B): the accelerator sends its pods to kwok's GKE-like nodes."""

    def role(role: str, count: int) -> dict[str, Any]:
        return {"role": role, "count": count, "template": {"spec": {"containers": [
            {"name": "trainer", "image": "localhost/none:1", "command": ["python", "train.py"]}]}}}  # fmt: skip

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DistributedTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "framework": "PyTorch",
            "replicas": ([role("Master", 1)] if master else []) + [role("Worker", workers)],
            "accelerator": {"type": "nvidia-h100-80gb", "count": 8},
            # Auto would pick GPUDirect-TCPX for H100s: its privileged sidecar is GKE-only plumbing.
            "nccl": {"profile": "TCP"},
            # Shared by every pod (kwok runs no container: any volume will do, but one must be given).
            "checkpoint": {"volume": {"hostPath": {"path": "/var/tmp/dtjob-checkpoints"}}},
            **spec,
        },
    }


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)[:3000]


# A test's own fake nodes carry this taint, and only its pods tolerate it: with xdist workers side by side
# another test's pod could otherwise land on a node that this test then deletes, taints or silences.
OWN_NODE_TAINT = {"key": "test.dtjob.io/own-node", "value": "true", "effect": "NoSchedule"}
OWN_NODE_TOLERATION = {"key": OWN_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}


def pin_to_nodes(pod_spec: dict[str, Any], nodes: list[str]) -> None:
    """The pod runs only on `nodes` (a test's own nodes, whose taint it tolerates)."""
    hosts = {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
    pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [hosts]}]}}}  # fmt: skip
    pod_spec.setdefault("tolerations", []).append(OWN_NODE_TOLERATION)


def gang_job(
    name: str, workers: int = 2, master: bool = False, nodes: list[str] | None = None, **spec: Any
) -> dict[str, Any]:
    """A PyTorch job whose pods go within a second of their deletion (the default grace is 30 s), and whose
    broken gang is watched 2 s for a disruption (30 s by default) unless `runPolicy` says otherwise. Given
    `nodes`, its pods run only there, so a test may delete the node of one of them."""
    run_policy = {"failureSettleSeconds": 2, **spec.pop("runPolicy", {})}
    job = pytorch_job(name, workers=workers, master=master, runPolicy=run_policy, **spec)
    for replica in job["spec"]["replicas"]:
        pod_spec = replica["template"]["spec"]
        pod_spec["terminationGracePeriodSeconds"] = 1
        if nodes:
            pin_to_nodes(pod_spec, nodes)
    return job


def gang_of_attempt(
    jobs: Jobs, name: str, attempt: int, count: int, timeout: float = 60
) -> list[client.V1Pod]:
    """Wait until the job's live pods are exactly `count` Running pods of `attempt`."""

    def whole() -> tuple[list[client.V1Pod]] | None:
        pods = jobs.pods(name)
        if len(pods) == count and all(
            p.metadata.labels[ATTEMPT_LABEL] == str(attempt) and p.status.phase == "Running" for p in pods
        ):
            return (pods,)
        return None

    try:
        return wait_for(whole, f"{count} Running pods of attempt {attempt} of {name}", timeout=timeout)[0]
    except AssertionError as timed_out:
        pods = [(p.metadata.name, p.metadata.labels[ATTEMPT_LABEL], p.status.phase) for p in jobs.pods(name)]
        raise AssertionError(f"{timed_out}; pods {pods}; status {status_of(jobs, name)}") from None


def status_of(jobs: Jobs, name: str) -> dict[str, Any]:
    status: dict[str, Any] = jobs.get(name).get("status", {})
    return status


def events_of(core: client.CoreV1Api, namespace: str, name: str) -> list[client.CoreV1Event]:
    items: list[client.CoreV1Event] = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    ).items
    return items


def pod_story(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    """What a pod that does not get going shows: its phase, conditions, containers' states and events."""
    try:
        found = core.read_namespaced_pod(pod, namespace)
    except client.ApiException as err:
        return f"pod {pod}: {err.status} {err.reason}"
    status = found.status
    conditions = "; ".join(
        f"{c.type}={c.status} {c.reason or ''} {c.message or ''}" for c in status.conditions or []
    )
    containers = "; ".join(f"{c.name}: {c.state}" for c in status.container_statuses or [])
    events = "; ".join(f"{e.reason}: {e.message}" for e in events_of(core, namespace, pod))
    return (
        f"pod {pod} on {found.spec.node_name}: {status.phase}; conditions: {conditions}; "
        f"containers: {containers}; events: {events}"
    )


def gang_story(jobs: Jobs, name: str, log_lines: int = 15) -> str:
    """What a job that does not get on shows: each of its pods' story and last log lines, and its status."""
    parts = []
    for pod in jobs.pods(name):
        try:
            log = jobs.core.read_namespaced_pod_log(pod.metadata.name, jobs.namespace, tail_lines=log_lines)
        except client.ApiException as err:
            log = f"(no log: {err.status} {err.reason})"
        parts.append(f"{pod_story(jobs.core, jobs.namespace, pod.metadata.name)}\n  log: {log}")
    return "\n".join([*parts, f"status: {dump(status_of(jobs, name))}"])


def still_there(core: client.CoreV1Api, namespace: str, pod: client.V1Pod) -> bool:
    try:
        return bool(core.read_namespaced_pod(pod.metadata.name, namespace).metadata.uid == pod.metadata.uid)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise


def evict(core: client.CoreV1Api, namespace: str, pod: str) -> None:
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    core.create_namespaced_pod_eviction(pod, namespace, eviction)
