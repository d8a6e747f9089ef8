"""Kueue as platform teams run it, on tier C (real pods): `waitForPodsReady` on with a 30 s timeout
(`make test`: 30 s x its pace), `blockAdmission` and a requeuing strategy (localcluster/kueue.py:
wait_for_pods_ready). A gang that runs
tells Kueue so (the Workload's PodsReady) and is never evicted; a gang that cannot start is evicted at the
timeout, requeued, then deactivated as Kueue's requeuing strategy says, and the job says why
(docs/kueue.md#waitforpodsready).

Adds about 2.5 minutes at a 30 s timeout (4.5 at `make test`'s pace of 2) to the Kueue part of `make
test`, which runs beside the longer shared part and ends well before it: the timeout is Kueue's own clock
(two timeouts of the gang that cannot start, three of the one that runs)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from hack import images
from localcluster import Cluster
from localcluster.kueue import wait_for_pods_ready
from tests.support.ddp_digits import EXAMPLE
from tests.support.jobs import Jobs
from tests.support.kueue import kueue_objects, release_workloads, workload_of
from tests.support.operator import running_operator
from tests.support.sharing import sharing
from tests.support.waiting import wait_for

# Kueue runs from the module's first test to its end: one test at a time (`make test`'s Kueue part).
pytestmark = pytest.mark.kueue

KUEUE = "kueue.x-k8s.io"
# The timeout the Kueue this test starts runs with (the suite's pace stretches it).
WAIT_FOR_PODS_READY = wait_for_pods_ready()
TIMEOUT = float(WAIT_FOR_PODS_READY["timeout"].removesuffix("s"))
assert WAIT_FOR_PODS_READY["blockAdmission"]
# What the steady gang does: nothing Kueue could tell from training, for 3 timeouts and a margin.
RUNS_FOR = 3 * TIMEOUT + 10


@pytest.fixture
def kueue_c(cluster_c: Cluster) -> Iterator[Cluster]:
    if not cluster_c.procs.running("kueue"):
        cluster_c.up_kueue()
    yield cluster_c
    with sharing():
        cluster_c.down_kueue()


@pytest.fixture
def queue(kueue_c: Cluster, objects: client.CustomObjectsApi, namespace: str) -> Iterator[str]:
    """A LocalQueue onto a ClusterQueue of its own with room for both gangs at once: only waitForPodsReady
    (blockAdmission, the timeout) decides when each runs."""
    cluster_queue = f"cq-{uuid.uuid4().hex[:8]}"
    apply = kueue_objects(objects)
    for plural, body, where in (
        ("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}}, None),
        ("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": cluster_queue}, "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": "default-flavor",
                "resources": [{"name": "cpu", "nominalQuota": "2"}, {"name": "memory", "nominalQuota": "8Gi"}]}]}]}},
         None),
        ("localqueues", {"kind": "LocalQueue", "metadata": {"name": "team"}, "spec": {"clusterQueue": cluster_queue}},
         namespace),
    ):  # fmt: skip
        apply(plural, {"apiVersion": f"{KUEUE}/v1beta1", **body}, where)
    yield "team"
    release_workloads(objects, namespace)
    objects.delete_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", cluster_queue)


def gang(name: str, queue: str, image: str, command: list[str]) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"] = {"name": name, "labels": {f"{KUEUE}/queue-name": queue}}
    job["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = f"/var/lib/dtjob-examples/{name}"
    trainer = job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    trainer["image"], trainer["command"], trainer["args"] = image, command, []
    return job


def conditions_of(workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}


def scheduling_of(jobs: Jobs, name: str) -> list[str]:
    """Each pod's phase and PodScheduled condition: what a failure here needs to be read."""
    return [
        f"{p.metadata.name}: {p.status.phase} "
        + "; ".join(
            f"{c.type}={c.status} {c.reason or ''} {c.message or ''}" for c in p.status.conditions or []
        )
        for p in jobs.pods(name)
    ]


def test_a_running_gang_is_never_evicted_and_one_that_cannot_start_is_requeued_then_deactivated(
    queue: str, crd: dict[str, Any], jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    kueue_c: Cluster,
) -> None:  # fmt: skip
    image = images.deliver(kueue_c, images.TORCH_TRAINER)
    steady = gang("steady", queue, image, ["python", "-c", f"import time; time.sleep({RUNS_FOR})"])
    stuck = gang("stuck", queue, "localhost/dtjob-no-such-image:0", ["python", "-c", "pass"])
    # Were Kueue's evictions of it charged as preemptions, the second would fail it MaxPreemptionsExceeded.
    stuck["spec"]["runPolicy"] = {**stuck["spec"].get("runPolicy", {}), "maxPreemptions": 0}
    with running_operator(kueue_c, namespace):
        # The gang that runs tells Kueue it is ready: PodsReady=True on its Workload.
        jobs.create(steady)
        ready = wait_for(
            lambda: (c := conditions_of(workload_of(objects, namespace, "steady")).get("PodsReady"))
            and c["status"] == "True" and c,
            timeout=TIMEOUT, what="PodsReady=True on the steady gang's Workload",
            hopeless=lambda: (r := jobs.get("steady").get("status", {}).get("lastRestart"))
            and f"the steady gang was restarted: {r}; {scheduling_of(jobs, 'steady')}",
        )  # fmt: skip
        assert ready["reason"] == "Started", ready
        running_since = time.monotonic()

        # The gang that cannot start: evicted at the timeout, charged as Kueue says (a requeue count, not
        # a failure nor one of the job's maxPreemptions), and the job says why.
        jobs.create(stuck)
        evicted = wait_for(
            lambda: (c := conditions_of(workload_of(objects, namespace, "stuck")).get("Evicted"))
            and c["status"] == "True" and c,
            timeout=TIMEOUT + 60, what="the Workload of the gang that cannot start evicted",
        )  # fmt: skip
        assert evicted["reason"] == "PodsReadyTimeout", (evicted, scheduling_of(jobs, "stuck"))
        last = wait_for(
            lambda: jobs.get("stuck")["status"].get("lastRestart"), timeout=30, what="the eviction recorded"
        )
        assert "Exceeded the PodsReady timeout" in last["message"], last

        # Requeued once (backoffLimitCount 1), admitted again, evicted again: Kueue deactivates its
        # Workload, and the job stays Queued, saying so.
        wait_for(
            lambda: workload_of(objects, namespace, "stuck")["spec"].get("active") is False,
            timeout=2 * TIMEOUT + 90, what="the Workload of the gang that cannot start deactivated",
        )  # fmt: skip
        queued = wait_for(
            lambda: (s := jobs.get("stuck")["status"]).get("phase") == "Queued"
            and "the Workload is inactive" in str(s.get("conditions")) and s,
            timeout=60, what="the job of the deactivated Workload Queued, saying why",
        )  # fmt: skip
        restarts = queued["restarts"]
        assert (restarts["failures"], restarts["preemptions"]) == (0, 0) and restarts["requeues"] >= 1, queued
        wait_for(lambda: not jobs.pods("stuck"), timeout=60, what="the gang that cannot start gone")

        succeeded = jobs.wait_condition("steady", "Succeeded", timeout=RUNS_FOR + 60)
        ran = time.monotonic() - running_since
    assert ran >= 3 * TIMEOUT, f"the steady gang ran {ran:.0f} s, not 3 timeouts"
    status = jobs.get("steady")["status"]
    assert status["restarts"]["total"] == 0, (status.get("lastRestart"), succeeded)
    never = conditions_of(workload_of(objects, namespace, "steady"))
    assert never.get("Evicted", {}).get("status") != "True" and never["PodsReady"]["status"] == "True", never
