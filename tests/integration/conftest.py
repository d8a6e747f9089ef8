"""Integration fixtures: the generated CRD installed in the real apiserver, and the operator run in-process.

Each test gets its own operator watching only its own namespace (`kopf run --namespace`), so tests are
isolated and a test can stop and restart the operator mid-way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client
from prometheus_client import REGISTRY

from localcluster import Cluster, sim
from localcluster.layout import NODE_IP
from tests.ports import free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "training.dtjob.io_distributedtrainingjobs.yaml"
GROUP, VERSION, PLURAL = "training.dtjob.io", "v1alpha1", "distributedtrainingjobs"
JOB_LABEL = "training.dtjob.io/job-name"


@pytest.fixture
def crd(cluster_a: Cluster) -> dict[str, Any]:
    """Install (or update) the committed, generated CRD and wait until it is served."""
    local_cluster = cluster_a
    local_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    name = yaml.safe_load(CRD_FILE.read_text())["metadata"]["name"]
    local_cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    # Established can precede discovery by a moment: wait until kubectl can list the resource.
    wait_for(lambda: local_cluster.kubectl("get", "dtj", "-A") is not None, "the dtj short name in discovery")
    return yaml.safe_load(CRD_FILE.read_text())


@contextlib.contextmanager
def running_operator(cluster: Cluster, namespace: str) -> Iterator[KopfRunner]:
    """`kopf run --namespace` in this process: Kopf's own option names what the operator's readers watch."""
    args = ["run", "--standalone", "--namespace", namespace, "-m", "dtjob.handlers"]
    with KopfRunner(args, timeout=60) as runner:
        yield runner
    # A clean stop, and no handler ever crashed with a traceback.
    assert runner.exception is None, runner.exception
    assert "Traceback" not in runner.output, runner.output[-4000:]


@contextlib.contextmanager
def operator_taking_reports(
    cluster: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch, **env: str
) -> Iterator[tuple[KopfRunner, str]]:
    """`running_operator` with its progress intake on a free port (the pods reach it at the node's
    address), writing status on reports at most every second; yields it and the intake's URL."""
    port = free_port()
    url = f"http://{NODE_IP}:{port}/v1/progress"
    for name, value in {"DTJOB_PROGRESS_PORT": str(port), "DTJOB_PROGRESS_URL": url,
                        "DTJOB_PROGRESS_STATUS_SECONDS": "1", **env}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    with running_operator(cluster, namespace) as runner:
        yield runner, url


@pytest.fixture
def operator(cluster_b: Cluster, crd: dict[str, Any], namespace: str) -> Iterator[KopfRunner]:
    with running_operator(cluster_b, namespace) as runner:
        yield runner


@pytest.fixture
def objects(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


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


@pytest.fixture
def jobs(objects: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str) -> Jobs:
    return Jobs(objects, core, namespace)


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


@pytest.fixture
def own_nodes(cluster_b: Cluster, core: client.CoreV1Api) -> Iterator[list[str]]:
    """Three fresh fake GPU nodes for this test alone, which may delete them; removed afterwards."""
    names = [sim.add_gpu_node(cluster_b, index) for index in random.sample(range(5000, 10000), 3)]
    yield names
    for name in names:
        try:
            core.delete_node(name)
        except client.ApiException as err:
            if err.status != 404:
                raise


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)[:3000]


def passes() -> float:
    """Reconcile passes the in-process operator has finished so far."""
    return REGISTRY.get_sample_value("dtjob_reconcile_duration_seconds_count") or 0.0


def wake(jobs: Jobs, name: str, n: int) -> None:
    """Touch the job (an annotation: a job event) and wait until the operator ran a pass on it."""
    before = passes()
    jobs.patch(name, {"metadata": {"annotations": {"test.dtjob.io/poke": str(n)}}})
    wait_for(lambda: passes() > before, "a pass after the job changed")


class Records(logging.Handler):
    """The operator's log records as they happen (it runs in this process)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def adapter_log() -> Iterator[Records]:
    """What the in-process operator's adapter logs (a failed pass says "reconcile of ...")."""
    records, logger = Records(), logging.getLogger("dtjob.handlers")
    logger.addHandler(records)
    yield records
    logger.removeHandler(records)
