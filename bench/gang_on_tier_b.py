"""What the tier-B benchmarks share: an in-process operator watching a namespace of its own on the local
cluster, and polling helpers that time a gang's pods and its job's status (20 ms resolution)."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from localcluster import Cluster, Tier
from localcluster.layout import Layout

# The kubernetes client (and Kopf's login through it) reads KUBECONFIG once, when first imported.
os.environ["KUBECONFIG"] = str(Layout.from_env().kubeconfig())

from kopf.testing import KopfRunner
from kubernetes import client, config

from dtjob.core.names import ATTEMPT_LABEL
from tests.support.jobs import GROUP, JOB_LABEL, PLURAL, VERSION

CRD_FILE = "crds/training.dtjob.io_distributedtrainingjobs.yaml"
POLL_SECONDS = 0.02


def wait(probe: Callable[[], bool], what: str, timeout: float = 60.0, every: float = POLL_SECONDS) -> float:
    """Poll until `probe` holds; the monotonic time it was first seen to."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f}s")
        time.sleep(every)
    return time.monotonic()


def describe(seconds: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(seconds, n=4, method="inclusive")
    return f"median {median:6.3f}  IQR {q1:6.3f}-{q3:6.3f}  min {min(seconds):6.3f}  max {max(seconds):6.3f}"


@dataclass(frozen=True)
class Namespace:
    core: client.CoreV1Api
    jobs: client.CustomObjectsApi
    name: str

    def create_job(self, manifest: dict[str, object]) -> None:
        self.jobs.create_namespaced_custom_object(GROUP, VERSION, self.name, PLURAL, manifest)

    def delete_jobs(self, timeout: float = 60.0, every: float = POLL_SECONDS) -> None:
        """Delete every job while the operator runs (it removes its finalizers), and wait until gone."""
        self.jobs.delete_collection_namespaced_custom_object(GROUP, VERSION, self.name, PLURAL)

        def gone() -> bool:
            listed = self.jobs.list_namespaced_custom_object(GROUP, VERSION, self.name, PLURAL, limit=1)
            return not listed["items"]

        wait(gone, "jobs deleted", timeout, every)


def tier_b(crd_file: str = CRD_FILE) -> Cluster:
    """Tier B (brought up if needed, left up) with the CRD applied."""
    cluster = Cluster()
    if cluster.running_tier() not in (Tier.B, Tier.C):
        cluster.up(Tier.B)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", crd_file)
    return cluster


def new_namespace(core: client.CoreV1Api, prefix: str) -> str:
    """A fresh namespace, `prefix` and a random suffix, once pods may be created in it."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait(lambda: bool(core.list_namespaced_service_account(name).items), "default ServiceAccount")
    return name


@contextlib.contextmanager
def operator_namespace(prefix: str) -> Iterator[Namespace]:
    """Tier B (brought up if needed, left up), the CRD, a fresh namespace and the operator watching it.
    Nothing may be printed inside: the runner captures this process's stdout while it runs."""
    cluster = tier_b()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    name = new_namespace(core, prefix)
    namespace = Namespace(core, client.CustomObjectsApi(api), name)
    try:
        args = ["run", "--standalone", "--namespace", name, "-m", "dtjob.runtime"]
        with KopfRunner(args, timeout=60):  # `--namespace` names what its readers watch
            try:
                yield namespace
            finally:
                namespace.delete_jobs()
    finally:
        core.delete_namespace(name)


class Gang:
    """One job's pods and its recorded attempt."""

    def __init__(self, namespace: Namespace, name: str) -> None:
        self.core, self.jobs, self.namespace, self.name = namespace.core, namespace.jobs, namespace.name, name

    def pods(self) -> list[client.V1Pod]:
        items: list[client.V1Pod] = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{JOB_LABEL}={self.name}"
        ).items
        return items

    def attempt(self) -> int:
        job = self.jobs.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        return int(job.get("status", {}).get("attempt", 1))

    def of_attempt(self, attempt: int) -> list[client.V1Pod]:
        return [p for p in self.pods() if p.metadata.labels[ATTEMPT_LABEL] == str(attempt)]

    def running(self, attempt: int, count: int) -> bool:
        pods = self.of_attempt(attempt)
        return len(pods) == count and all(p.status.phase == "Running" for p in pods)

    def preempted(self, pod: str) -> bool:
        return any(p.metadata.name == pod and p.status.phase == "Failed" for p in self.pods())
