"""How long a gang is down after a spot preemption: from the preemption to the whole new gang Running.

    .venv/bin/python -m bench.preemption_restart [--workers 4] [--repeats 20]

Tier B (brought up if needed, left up): the operator runs in-process, watching a namespace of its own;
kwok plays the kubelet of fake GKE GPU nodes and marks a pod the way GKE spot preemption leaves it. Each
round preempts one worker of a Running gang and times four points, from the moment the preemption
shows on the pod: the operator recorded the restart (status.attempt), the old gang is gone, every pod
of the new attempt exists, every one is Running. Polling every 20 ms bounds each reading's error.
kwok starts a pod in milliseconds, so the figure is the operator's share of the downtime: on GKE, add
the pods' scheduling, image pull and trainer start-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from localcluster import Cluster, Tier, sim
from localcluster.layout import Layout

# The kubernetes client (and Kopf's login through it) reads KUBECONFIG once, when first imported.
os.environ["KUBECONFIG"] = str(Layout.from_env().kubeconfig())

from kopf.testing import KopfRunner
from kubernetes import client, config

from tests.integration.conftest import GROUP, JOB_LABEL, PLURAL, VERSION, pytorch_job

CRD_FILE = "crds/training.dtjob.io_distributedtrainingjobs.yaml"
ATTEMPT_LABEL = "training.dtjob.io/attempt"
POLL_SECONDS = 0.02
MILESTONES = ("restart recorded", "old gang gone", "new pods created", "new gang Running")


def job_manifest(name: str, workers: int, repeats: int) -> dict[str, Any]:
    job = pytorch_job(name, workers=workers, runPolicy={"maxPreemptions": repeats + 1})
    for replica in job["spec"]["replicas"]:
        replica["template"]["spec"]["terminationGracePeriodSeconds"] = 1  # as a kubelet would take: kwok's
    return job


def wait(probe: Callable[[], bool], what: str, timeout: float = 60.0) -> float:
    """Poll until `probe` holds; the monotonic time it was first seen to."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f}s")
        time.sleep(POLL_SECONDS)
    return time.monotonic()


class Gang:
    def __init__(
        self, core: client.CoreV1Api, jobs: client.CustomObjectsApi, namespace: str, name: str
    ) -> None:
        self.core, self.jobs, self.namespace, self.name = core, jobs, namespace, name

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


def one_round(gang: Gang, attempt: int, workers: int) -> list[float]:
    """Preempt a worker of a Running gang of `attempt`; seconds from the preemption to each milestone."""
    pod = f"{gang.name}-worker-{attempt % workers}"
    sim.preempt_pod(gang.core, gang.namespace, pod)
    start = wait(lambda: gang.preempted(pod) or gang.attempt() > attempt, f"preemption of {pod}")
    points = [
        wait(lambda: gang.attempt() == attempt + 1, "restart in the status"),
        wait(lambda: not gang.of_attempt(attempt), "old gang gone"),
        wait(lambda: len(gang.of_attempt(attempt + 1)) == workers, "new pods"),
        wait(lambda: gang.running(attempt + 1, workers), "new gang Running"),
    ]
    return [point - start for point in points]


def describe(seconds: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(seconds, n=4, method="inclusive")
    return f"median {median:6.3f}  IQR {q1:6.3f}-{q3:6.3f}  min {min(seconds):6.3f}  max {max(seconds):6.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    cluster = Cluster()
    if cluster.running_tier() not in (Tier.B, Tier.C):
        cluster.up(Tier.B)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRD_FILE)
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core, jobs = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"bench-preemption-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait(lambda: bool(core.list_namespaced_service_account(namespace).items), "default ServiceAccount")
    gang = Gang(core, jobs, namespace, "bench")
    rounds: list[list[float]] = []
    try:
        with KopfRunner(
            ["run", "--standalone", "--namespace", namespace, "-m", "dtjob.handlers"], timeout=60
        ):
            jobs.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, job_manifest("bench", args.workers, args.repeats)
            )
            wait(lambda: gang.running(1, args.workers), "first gang Running")
            # (Nothing printed in here: the runner captures this process's stdout while it runs.)
            rounds = [one_round(gang, attempt, args.workers) for attempt in range(1, args.repeats + 1)]
            # Deleted while the operator runs, which removes its finalizer: the namespace can then go.
            jobs.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "bench")
            wait(
                lambda: not jobs.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"],
                "job deleted",
            )
    finally:
        core.delete_namespace(namespace)

    print(f"\n== seconds from a spot preemption to: ({args.workers} workers, {args.repeats} rounds, tier B)")
    for index, milestone in enumerate(MILESTONES):
        print(f"{milestone:18s} {describe([r[index] for r in rounds])}")
    print("rounds, to Running:", " ".join(f"{r[-1]:.3f}" for r in rounds))


if __name__ == "__main__":
    main()
