"""Jobs admitted through the real Kueue (built from its module, `localcluster up --addons kueue`) on tier B:
a gang is admitted whole or not at all, a queued job has no pod, finishing a job admits the next, and a
higher-priority job preempts a lower one, whose restart is a preemption that waits for re-admission."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client

from localcluster import Cluster, Tier, fakenodes, sim
from tests.support import hygiene
from tests.support.jobs import Jobs, pytorch_job
from tests.support.kueue import kueue_objects, release_workloads, workload_of
from tests.support.pace import liveness_timeout
from tests.support.paths import REPO
from tests.support.sharing import sharing
from tests.support.tiers import at_tier
from tests.support.waiting import wait_for

# Kueue runs from the module's first test to its end: one test at a time (`make test`'s cluster-wide part).
pytestmark = pytest.mark.kueue

KUEUE = "kueue.x-k8s.io"
GPUS_A_GANG = 16  # pytorch_job(master=True, workers=1): 2 pods of 8 GPUs


@pytest.fixture
def kueue_cluster(local_cluster: Cluster) -> Cluster:
    """Tier B with Kueue running: started by the module's first test, and again after a cluster-wide test
    took the cluster down (these tests run one at a time, so none stops it under another)."""
    cluster = at_tier(local_cluster, Tier.B)
    if not cluster.procs.running("kueue"):
        cluster.up_kueue()
    return cluster


@pytest.fixture(scope="module", autouse=True)
def kueue_stopped_after_the_module(local_cluster: Cluster) -> Iterator[None]:
    """Kueue stopped (its webhooks unregistered) after this module."""
    yield
    with sharing():
        local_cluster.down_kueue()


@pytest.fixture(autouse=True)
def workloads_released(
    kueue_cluster: Cluster, objects: client.CustomObjectsApi, namespace: str
) -> Iterator[None]:
    """After each test, once its operator (which watches its namespace only) has stopped: the operator's
    finalizer taken off the namespace's Workloads, as docs/kueue.md says to by hand, before the namespace
    goes. Left on, a Workload admitted but not yet ready (a test that ends as soon as its pods run) would
    stay for good, and with waitForPodsReady's blockAdmission hold every later admission (seen once)."""
    yield
    release_workloads(objects, namespace)


@pytest.fixture
def queue(
    kueue_cluster: Cluster, crd: dict[str, Any], objects: client.CustomObjectsApi, namespace: str
) -> Iterator[str]:
    """A LocalQueue in the test's namespace onto a ClusterQueue of its own with room for 3 gangs."""
    apply = kueue_objects(objects)
    apply("resourceflavors", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "h100"},
                              "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}})  # fmt: skip
    cluster_queue = f"cq-{uuid.uuid4().hex[:8]}"
    apply("clusterqueues", {
        "apiVersion": f"{KUEUE}/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                 "preemption": {"withinClusterQueue": "LowerPriority"},
                 "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "cpu"], "flavors": [
                     {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 3 * GPUS_A_GANG},
                                                    {"name": "cpu", "nominalQuota": 1000}]}]}]},
    })  # fmt: skip
    apply("localqueues", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "LocalQueue",
                          "metadata": {"name": "team", "namespace": namespace},
                          "spec": {"clusterQueue": cluster_queue}}, namespace)  # fmt: skip
    yield "team"
    objects.delete_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", cluster_queue)


def queued_job(name: str, queue: str, priority_class: str | None = None) -> dict[str, Any]:
    job = pytorch_job(name, workers=1, master=True)
    labels = {f"{KUEUE}/queue-name": queue}
    if priority_class:
        labels[f"{KUEUE}/priority-class"] = priority_class
    job["metadata"]["labels"] = labels
    return job


def gangs(jobs: Jobs, names: list[str]) -> dict[str, tuple[int, str | None]]:
    """Each job's pod count and phase, checking on the way that a job Kueue has not admitted has no pod
    and that no more unfinished gangs than the quota holds have pods."""
    seen = {}
    for name in names:
        job = jobs.get(name)
        admitted = any(
            c["type"] == "Admitted" and c["status"] == "True"
            for c in job.get("status", {}).get("conditions", [])
        )
        pods = len(jobs.pods(name))
        assert admitted or pods == 0, f"{name} has {pods} pod(s) but is not admitted: {job.get('status')}"
        seen[name] = (pods, job.get("status", {}).get("phase"))
    # A finished job's Workload is Finished, its quota free, while its last pods are still cleaned up.
    live = [pods for pods, phase in seen.values() if pods and phase not in ("Succeeded", "Failed")]
    assert len(live) <= 3, f"more gangs than the quota holds: {seen}"
    return seen


def test_a_quota_for_three_gangs_runs_three_of_five_and_finishing_one_admits_the_next(
    kueue_cluster: Cluster,
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    queue: str,
) -> None:
    names = [f"q{i}" for i in range(5)]
    for name in names:
        jobs.create(queued_job(name, queue))
    jobs.create(queued_job("astray", "no-such-queue"))

    def settled() -> dict[str, tuple[int, str | None]] | None:
        seen = gangs(jobs, names)
        phases = sorted(phase or "" for _, phase in seen.values())
        return seen if phases == ["Queued", "Queued", "Running", "Running", "Running"] else None

    seen = wait_for(settled, "3 jobs Running and 2 Queued", timeout=90)
    waiting = [name for name, (_, phase) in seen.items() if phase == "Queued"]
    for name in waiting:
        message = jobs.condition(name, "Queued")["message"]
        assert f"LocalQueue {queue} (ClusterQueue cq-" in message and "quota" in message, message
    astray = jobs.condition("astray", "Queued")["message"]
    assert "LocalQueue no-such-queue (no such LocalQueue in the job's namespace)" in astray, astray
    assert jobs.pods("astray") == []
    running = [name for name, (_, phase) in seen.items() if phase == "Running"]
    assert "ClusterQueue cq-" in jobs.condition(running[0], "Admitted")["message"]
    for pod in jobs.pods(running[0]):
        assert pod.metadata.labels[f"{KUEUE}/podset"] in ("master", "worker")
        assert pod.spec.node_selector["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"

    sim.exit_pod(core, namespace, f"{running[0]}-master-0", exit_code=0)
    jobs.wait_condition(running[0], "Succeeded")
    wait_for(lambda: sum(1 for n in waiting if gangs(jobs, names)[n][1] == "Running") == 1,
             "the next queued job admitted and Running", timeout=90)  # fmt: skip
    workload = workload_of(client.CustomObjectsApi(core.api_client), namespace, running[0])
    assert any(c["type"] == "Finished" and c["status"] == "True" for c in workload["status"]["conditions"])


def test_a_higher_priority_job_preempts_a_lower_one_whose_restart_is_a_preemption(
    kueue_cluster: Cluster,
    operator: KopfRunner,
    jobs: Jobs,
    objects: client.CustomObjectsApi,
    namespace: str,
    queue: str,
) -> None:
    apply = kueue_objects(objects)
    for name, value in (("dtjob-test-low", 10), ("dtjob-test-high", 1000)):
        apply("workloadpriorityclasses", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "WorkloadPriorityClass",
                                          "metadata": {"name": name}, "value": value})  # fmt: skip
    low = [f"low{i}" for i in range(3)]
    for name in low:
        jobs.create(queued_job(name, queue, "dtjob-test-low"))
    for name in low:
        jobs.wait_pods(name, 2, phase="Running", timeout=90)
    first_pods = {name: {p.metadata.uid for p in jobs.pods(name)} for name in low}

    jobs.create(queued_job("urgent", queue, "dtjob-test-high"))
    jobs.wait_pods("urgent", 2, phase="Running", timeout=90)
    victims = [name for name in low if jobs.get(name)["status"]["restarts"]["total"]]
    assert len(victims) == 1, {name: jobs.get(name)["status"] for name in low}
    victim = jobs.get(victims[0])["status"]
    assert victim["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
    assert victim["phase"] == "Queued" and "evicted by Kueue" in victim["lastRestart"]["message"]
    assert jobs.pods(victims[0]) == []
    for name in low:
        if name != victims[0]:
            assert {p.metadata.uid for p in jobs.pods(name)} == first_pods[name]  # untouched

    # The urgent job done, the victim is admitted again and resumes as its next attempt.
    sim.exit_pod(jobs.core, namespace, "urgent-master-0", exit_code=0)
    pods = jobs.wait_pods(victims[0], 2, phase="Running", timeout=90)
    assert {p.metadata.labels["training.dtjob.io/attempt"] for p in pods} == {"2"}
    assert jobs.get(victims[0])["status"]["restarts"]["preemptions"] == 1  # counted once


def test_a_queue_drained_under_a_running_gang_requeues_it_without_spending_max_preemptions(
    kueue_cluster: Cluster,
    operator: KopfRunner,
    jobs: Jobs,
    objects: client.CustomObjectsApi,
    namespace: str,
    queue: str,
) -> None:
    """A ClusterQueue stopped with HoldAndDrain evicts its admitted Workloads (ClusterQueueStopped): an
    administrator's drain, which Kueue undoes when the queue starts again, not a preemption of the job.
    With maxPreemptions 0, charging it as one would fail the job (MaxPreemptionsExceeded)."""
    job = queued_job("drained", queue)
    job["spec"]["runPolicy"] = {"maxPreemptions": 0}
    jobs.create(job)
    jobs.wait_pods("drained", 2, phase="Running", timeout=90)
    local_queue = objects.get_namespaced_custom_object(KUEUE, "v1beta1", namespace, "localqueues", queue)
    cluster_queue = local_queue["spec"]["clusterQueue"]

    def stop_policy(policy: str) -> None:
        objects.patch_cluster_custom_object(
            KUEUE, "v1beta1", "clusterqueues", cluster_queue, {"spec": {"stopPolicy": policy}}
        )

    stop_policy("HoldAndDrain")
    status = wait_for(
        lambda: (s := jobs.get("drained")["status"]).get("phase") == "Queued" and not jobs.pods("drained") and s,
        timeout=60, what="the drained gang deleted and its job Queued",
        state=lambda: jobs.get("drained").get("status"),
    )  # fmt: skip
    assert status["restarts"] == {"failures": 0, "preemptions": 0, "requeues": 1, "total": 1}, status
    assert status["lastRestart"]["reason"] == "Requeued", status["lastRestart"]
    assert "evicted by Kueue: The ClusterQueue is stopped" in status["lastRestart"]["message"], status

    # The queue started again: Kueue admits the Workload again and the gang runs its next attempt.
    stop_policy("None")
    pods = jobs.wait_pods("drained", 2, phase="Running", timeout=90)
    assert {p.metadata.labels["training.dtjob.io/attempt"] for p in pods} == {"2"}
    assert jobs.get("drained")["status"]["restarts"]["total"] == 1  # counted once


def test_a_queued_gang_is_admitted_with_its_hot_spare_which_takes_a_preempted_rank_within_the_admission(
    kueue_cluster: Cluster,
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    objects: client.CustomObjectsApi,
    namespace: str,
    queue: str,
) -> None:
    """spec.replicas[].spares under Kueue: the spare holds a GPU machine, so the Workload asks for it and
    the gang is admitted with it. A preempted member's rank goes to the running spare without leaving the
    admission: the Workload is neither evicted nor admitted again, the ClusterQueue reserves the gang and
    its spare and no more, and the spare made up behind it runs under the same admission."""
    job = queued_job("spared", queue)
    job["spec"]["runPolicy"] = {"restartStrategy": "InPlace"}
    job["spec"]["torch"] = {"nprocPerNode": 1}  # a spare learns its rank from a file: one process a pod
    next(r for r in job["spec"]["replicas"] if r["role"] == "Worker")["spares"] = 1
    jobs.create(job)
    first = {p.metadata.name: p for p in jobs.wait_pods("spared", 3, phase="Running", timeout=90)}
    assert "spared-worker-spare0" in first, sorted(first)
    workload = workload_of(objects, namespace, "spared")
    assert sum(s["count"] for s in workload["spec"]["podSets"]) == 3, workload["spec"]["podSets"]
    local_queue = objects.get_namespaced_custom_object(KUEUE, "v1beta1", namespace, "localqueues", queue)
    cluster_queue = local_queue["spec"]["clusterQueue"]

    def reserved_gpus() -> str:
        status = objects.get_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", cluster_queue)["status"]
        return next(
            str(r["total"])
            for flavor in status.get("flavorsReservation") or []
            for r in flavor["resources"]
            if r["name"] == "nvidia.com/gpu"
        )

    assert wait_for(lambda: reserved_gpus() == "24", "the gang and its spare reserved", timeout=30,
                    state=reserved_gpus)  # fmt: skip
    sim.preempt_pod(core, namespace, "spared-worker-0")

    def taken_over() -> dict[str, str] | None:
        pods = {p.metadata.name: p for p in jobs.pods("spared")}
        labels = {n: p.metadata.labels.get("training.dtjob.io/attempt", "spare") for n, p in pods.items()}
        running = all(p.status.phase == "Running" for p in pods.values())
        return labels if running and sorted(labels.values()) == ["2", "2", "spare"] else None

    pods = wait_for(taken_over, "attempt 2 with the spare in the lost rank, and a spare behind it", timeout=90,
                    state=lambda: [(p.metadata.name, p.metadata.labels, p.status.phase) for p in jobs.pods("spared")])  # fmt: skip
    assert pods["spared-worker-spare0"] == "2" and pods["spared-master-0"] == "2", pods
    assert "spared-worker-0" not in pods, pods  # no pod was created for the lost rank
    status = jobs.get("spared")["status"]
    assert status["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}, status
    after = workload_of(objects, namespace, "spared")
    assert after["metadata"]["uid"] == workload["metadata"]["uid"]
    assert after["status"]["admission"] == workload["status"]["admission"]
    conditions = {c["type"]: c["status"] for c in after["status"]["conditions"]}
    assert conditions.get("Admitted") == "True" and conditions.get("Evicted", "False") == "False", conditions
    assert reserved_gpus() == "24"


@contextlib.contextmanager
def operator_process(namespace: str, log_dir: Path) -> Iterator[Callable[[], None]]:
    """`dtjob run` in processes of its own; yields `crash`: SIGKILL the running one, start the next."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("DTJOB_METRICS_PORT", None)
    processes: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        with (log_dir / f"operator-{len(processes)}.log").open("w") as log:
            processes.append(subprocess.Popen([sys.executable, "-m", "dtjob.cli", "run", "--namespace", namespace],
                                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))  # fmt: skip

    def crash() -> None:
        processes[-1].kill()
        processes[-1].wait()
        start()

    start()
    try:
        yield crash
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


def workload_condition(objects: client.CustomObjectsApi, namespace: str, job: str, type_: str) -> bool:
    with contextlib.suppress(LookupError):
        found = workload_of(objects, namespace, job)
        return any(
            c["type"] == type_ and c["status"] == "True"
            for c in found.get("status", {}).get("conditions", [])
        )
    return False


def test_an_operator_killed_during_admission_and_during_eviction_duplicates_nothing_and_counts_once(
    kueue_cluster: Cluster, crd: dict[str, Any], jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str, tmp_path: Path,
) -> None:  # fmt: skip
    apply = kueue_objects(objects)
    for name, value in (("dtjob-test-low", 10), ("dtjob-test-high", 1000)):
        apply("workloadpriorityclasses", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "WorkloadPriorityClass",
                                          "metadata": {"name": name}, "value": value})  # fmt: skip
    low = [f"low{i}" for i in range(3)]

    def at_most_a_gang() -> None:
        for name in [*low, "urgent"]:
            assert len(jobs.pods(name)) <= 2, f"{name}: {[p.metadata.name for p in jobs.pods(name)]}"

    with operator_process(namespace, tmp_path) as crash:
        for name in low:
            jobs.create(queued_job(name, queue, "dtjob-test-low"))
        # Killed the moment Kueue admits a gang: its pods are about to be created, or partly are.
        wait_for(lambda: any(workload_condition(objects, namespace, n, "Admitted") for n in low),
                 "a gang admitted", interval=0.02)  # fmt: skip
        crash()
        for name in low:
            jobs.wait_pods(name, 2, phase="Running", timeout=90)
            at_most_a_gang()
        first_pods = {name: {p.metadata.uid for p in jobs.pods(name)} for name in low}
        assert all(
            jobs.get(n)["status"]["restarts"]["total"] == 0 and jobs.get(n)["status"]["attempt"] == 1
            for n in low
        )

        jobs.create(queued_job("urgent", queue, "dtjob-test-high"))
        # Killed the moment Kueue evicts a victim: its gang is to go and its restart to be counted.
        wait_for(lambda: any(workload_condition(objects, namespace, n, "Evicted") for n in low),
                 "a low job evicted", interval=0.02)  # fmt: skip
        crash()
        jobs.wait_pods("urgent", 2, phase="Running", timeout=90)
        at_most_a_gang()
        victims = [n for n in low if jobs.get(n)["status"]["restarts"]["total"]]
        assert len(victims) == 1, {n: jobs.get(n)["status"]["restarts"] for n in low}
        assert jobs.get(victims[0])["status"]["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
        for name in low:
            if name != victims[0]:
                assert {p.metadata.uid for p in jobs.pods(name)} == first_pods[name]
        sim.exit_pod(jobs.core, namespace, "urgent-master-0", exit_code=0)
        pods = jobs.wait_pods(victims[0], 2, phase="Running", timeout=90)
        assert {p.metadata.labels["training.dtjob.io/attempt"] for p in pods} == {"2"}
        assert jobs.get(victims[0])["status"]["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}


def one_running_one_queued(jobs: Jobs, queue: str, names: list[str]) -> tuple[str, str]:
    """Four jobs created into the queue's room for three gangs, once three run: one that runs and the one
    that waits."""
    for name in names:
        jobs.create(queued_job(name, queue))
    seen = wait_for(lambda: (g := gangs(jobs, names)) and sum(p == "Running" for _, p in g.values()) == 3 and g,
                    "3 of 4 jobs Running", timeout=90)  # fmt: skip
    running = next(name for name, (_, phase) in seen.items() if phase == "Running")
    waiting = next(name for name, (_, phase) in seen.items() if phase == "Queued")
    return running, waiting


def test_suspending_a_queued_job_frees_its_quota_and_resuming_queues_it_again(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, namespace: str, queue: str
) -> None:
    names = [f"s{i}" for i in range(4)]
    paused, waiting = one_running_one_queued(jobs, queue, names)
    jobs.patch(paused, {"spec": {"runPolicy": {"suspend": True}}})
    jobs.wait_pods(waiting, 2, phase="Running", timeout=90)  # the suspended job's quota went to it
    assert jobs.pods(paused) == [] and jobs.get(paused)["status"]["phase"] == "Suspended"
    jobs.patch(paused, {"spec": {"runPolicy": {"suspend": False}}})
    wait_for(
        lambda: jobs.get(paused)["status"]["phase"] == "Queued", "the resumed job Queued (no quota left)"
    )
    assert jobs.pods(paused) == []
    assert jobs.get(paused)["status"]["restarts"]["total"] == 0
    gangs(jobs, names)


def finish_workload(objects: client.CustomObjectsApi, namespace: str, job: str) -> None:
    """Mark the job's Workload Finished as Kueue's jobframework does when a job cannot start."""
    found = workload_of(objects, namespace, job)
    name = found["metadata"]["name"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [*found.get("status", {}).get("conditions", []), {
        "type": "Finished", "status": "True", "reason": "FailedToStart", "message": "the test says so",
        "lastTransitionTime": now}]  # fmt: skip
    objects.patch_namespaced_custom_object_status(
        KUEUE, "v1beta1", namespace, "workloads", name, {"status": {"conditions": conditions}}
    )


def test_a_workload_finished_behind_the_jobs_back_fails_it_queued_or_running_and_its_pods_go(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str,
) -> None:  # fmt: skip
    running, waiting = one_running_one_queued(jobs, queue, [f"f{i}" for i in range(4)])
    for name in (waiting, running):
        finish_workload(objects, namespace, name)
    for name in (waiting, running):
        failed = jobs.wait_condition(name, "Failed", timeout=60)
        assert failed["reason"] == "WorkloadFinished", failed
        assert failed["message"].endswith("FailedToStart: the test says so"), failed
    wait_for(lambda: jobs.pods(running) == [], f"{running}'s pods deleted", timeout=60)
    assert jobs.pods(waiting) == []
    assert jobs.get(running)["status"]["restarts"]["total"] == 0


BLOCK = "cloud.google.com/gce-topology-block"
# GKE's gke-default Topology, as docs/kueue.md shows it (Google's TAS page, read 2026-11-28): the fake nodes carry
# all four labels (localcluster/fakenodes.py).
GKE_DEFAULT_LEVELS = [BLOCK, "cloud.google.com/gce-topology-subblock", "cloud.google.com/gce-topology-host",
                      "kubernetes.io/hostname"]  # fmt: skip


def cluster_queue_active(objects: client.CustomObjectsApi, name: str) -> bool:
    found = objects.get_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", name)
    return any(
        c["type"] == "Active" and c["status"] == "True" for c in found.get("status", {}).get("conditions", [])
    )


@pytest.mark.parametrize("asked", [True, False], ids=["a block asked for", "implicit TAS"])
def test_tas_places_the_gang_in_one_block_when_asked_and_places_a_gang_that_asked_nothing_too(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi,
    core: client.CoreV1Api, namespace: str, asked: bool,
) -> None:  # fmt: skip
    """Kueue's Topology Aware Scheduling places the gang: in one block when the job asks for it; in a
    ClusterQueue of TAS flavors only, a job that asks nothing is placed too (implicit TAS: its pods must
    say so for Kueue's ungater to take them)."""
    apply = kueue_objects(objects)
    suffix = uuid.uuid4().hex[:8]
    topology, flavor = f"blocks-{suffix}", f"h100-blocks-{suffix}"
    apply("topologies", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "Topology", "metadata": {"name": topology},
                         "spec": {"levels": [{"nodeLabel": label} for label in GKE_DEFAULT_LEVELS]}})  # fmt: skip
    apply("resourceflavors", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": flavor},
                              "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                                       "topologyName": topology}})  # fmt: skip
    cluster_queue = f"cq-tas-{suffix}"
    apply("clusterqueues", {
        "apiVersion": f"{KUEUE}/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                 "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                     {"name": flavor, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 800}]}]}]},
    })  # fmt: skip
    apply("localqueues", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "LocalQueue",
                          "metadata": {"name": "compact", "namespace": namespace},
                          "spec": {"clusterQueue": cluster_queue}}, namespace)  # fmt: skip
    try:
        # A ClusterQueue is Active once Kueue has its flavors and their Topology in hand; a gang admitted
        # before that got an empty topology assignment and stayed gated (seen once in a full run).
        wait_for(lambda: cluster_queue_active(objects, cluster_queue), f"ClusterQueue {cluster_queue} Active")
        job = queued_job("compact", "compact")
        # 10 nodes' worth: more than the smallest block (8 nodes), which Kueue would fill first otherwise.
        # A Master and 9 Workers, scheduled alike: one podSet of the whole gang (docs/kueue.md).
        job["spec"]["replicas"] = pytorch_job("compact", workers=9, master=True)["spec"]["replicas"]
        for replica in job["spec"]["replicas"] if asked else []:
            replica["template"]["metadata"] = {"annotations": {f"{KUEUE}/podset-required-topology": BLOCK}}
        jobs.create(job)
        try:
            pods = jobs.wait_pods("compact", 10, phase="Running", timeout=120)
        except AssertionError as timed_out:
            workload = workload_of(objects, namespace, "compact")
            gated = {p.metadata.name: (p.spec.node_selector, p.spec.scheduling_gates, p.status.conditions)
                     for p in jobs.pods("compact")}  # fmt: skip
            raise AssertionError(
                f"{timed_out}\nworkload status: {workload.get('status')}\npods: {gated}"
            ) from None
        assert all(not p.spec.scheduling_gates for p in pods)  # Kueue's ungater placed each one
        assert {p.metadata.labels["training.dtjob.io/role"] for p in pods} == {"Master", "Worker"}
        workload = workload_of(objects, namespace, "compact")
        if not asked:
            assert [(ps["name"], ps.get("topologyRequest")) for ps in workload["spec"]["podSets"]] == [
                ("master", None), ("worker", None)]  # fmt: skip
            assert all(
                p.metadata.annotations[f"{KUEUE}/podset-unconstrained-topology"] == "true" for p in pods
            )
            return
        # Kueue was asked: on an empty fleet its TAS packs a gang anyway, so the placement alone says little.
        assert [
            (ps["name"], ps["count"], ps["topologyRequest"]["required"]) for ps in workload["spec"]["podSets"]
        ] == [("gang", 10, BLOCK)]
        blocks = {core.read_node(p.spec.node_name).metadata.labels[BLOCK] for p in pods}
        assert len(blocks) == 1, {p.metadata.name: p.spec.node_name for p in pods}
    finally:
        objects.delete_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", cluster_queue)


PROVISIONING = ("autoscaling.x-k8s.io", "v1", "provisioningrequests")
CONSUMES = "autoscaling.x-k8s.io/consume-provisioning-request"


@pytest.fixture
def dws_queue(
    kueue_cluster: Cluster, crd: dict[str, Any], objects: client.CustomObjectsApi, namespace: str
) -> Iterator[str]:
    """A LocalQueue whose ClusterQueue has the provisioning admission check (GKE's Dynamic Workload
    Scheduler class; the test plays the provisioner). One retry after a failure, a second apart."""
    apply = kueue_objects(objects)
    suffix = uuid.uuid4().hex[:8]
    config, check, cluster_queue = f"dws-{suffix}", f"dws-prov-{suffix}", f"cq-dws-{suffix}"
    apply("provisioningrequestconfigs", {
        "apiVersion": f"{KUEUE}/v1beta1", "kind": "ProvisioningRequestConfig", "metadata": {"name": config},
        "spec": {"provisioningClassName": "queued-provisioning.gke.io", "managedResources": ["nvidia.com/gpu"],
                 "retryStrategy": {"backoffLimitCount": 1, "backoffBaseSeconds": 1, "backoffMaxSeconds": 2}},
    })  # fmt: skip
    apply("admissionchecks", {
        "apiVersion": f"{KUEUE}/v1beta1", "kind": "AdmissionCheck", "metadata": {"name": check},
        "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request",
                 "parameters": {"apiGroup": KUEUE, "kind": "ProvisioningRequestConfig", "name": config}},
    })  # fmt: skip
    apply("resourceflavors", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "h100"},
                              "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}})  # fmt: skip
    apply("clusterqueues", {
        "apiVersion": f"{KUEUE}/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                 "admissionChecks": [check],
                 "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                     {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 800}]}]}]},
    })  # fmt: skip
    apply("localqueues", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "LocalQueue",
                          "metadata": {"name": "dws", "namespace": namespace},
                          "spec": {"clusterQueue": cluster_queue}}, namespace)  # fmt: skip
    yield check
    objects.delete_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", cluster_queue)
    objects.delete_cluster_custom_object(KUEUE, "v1beta1", "admissionchecks", check)


def provisioning_request(objects: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = objects.get_namespaced_custom_object(
        *PROVISIONING[:2], namespace, PROVISIONING[2], name
    )
    return found


def provisioner_says(objects: client.CustomObjectsApi, namespace: str, name: str, type_: str) -> None:
    """What a cluster autoscaler would write on the ProvisioningRequest: Provisioned or Failed."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": type_, "status": "True", "reason": type_, "message": f"the test says {type_}",
                 "lastTransitionTime": now}  # fmt: skip
    objects.patch_namespaced_custom_object_status(
        *PROVISIONING[:2], namespace, PROVISIONING[2], name, {"status": {"conditions": [condition]}}
    )


def test_the_provisioning_check_holds_the_gang_until_capacity_is_provisioned(
    operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str, dws_queue: str
) -> None:
    job = queued_job("dws", "dws")
    job["metadata"]["annotations"] = {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600"}  # DWS's limit
    jobs.create(job)
    request = f"{wait_for(lambda: workload_of(objects, namespace, 'dws'), 'its Workload')['metadata']['name']}-{dws_queue}-1"
    made = wait_for(
        lambda: provisioning_request(objects, namespace, request), f"ProvisioningRequest {request}"
    )
    assert made["spec"].get("parameters") == {"maxRunDurationSeconds": "600"}, made["spec"]
    wait_for(lambda: f"{dws_queue}: Pending" in (jobs.condition("dws", "Queued") or {}).get("message", ""),
             "the job Queued on the pending check")  # fmt: skip
    assert jobs.pods("dws") == []
    provisioner_says(objects, namespace, request, "Provisioned")
    pods = jobs.wait_pods("dws", 2, phase="Running", timeout=90)
    for pod in pods:  # the check's podSetUpdates: the pods consume the capacity provisioned for them
        assert pod.metadata.annotations[CONSUMES] == request
        assert (
            pod.metadata.annotations["autoscaling.x-k8s.io/provisioning-class-name"]
            == "queued-provisioning.gke.io"
        )
        tolerated = {(t.key, t.operator, t.effect) for t in pod.spec.tolerations}
        assert ("cloud.google.com/gke-queued", "Exists", "NoSchedule") in tolerated  # GKE's DWS nodes' taint


def test_a_failed_provisioning_is_retried_as_kueue_says_and_never_charged_to_the_job(
    operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str, dws_queue: str
) -> None:
    jobs.create(queued_job("retry", "dws"))
    workload = wait_for(lambda: workload_of(objects, namespace, "retry"), "its Workload")["metadata"]["name"]
    first, second = (f"{workload}-{dws_queue}-{n}" for n in (1, 2))
    wait_for(lambda: provisioning_request(objects, namespace, first), f"ProvisioningRequest {first}")
    provisioner_says(objects, namespace, first, "Failed")
    wait_for(lambda: provisioning_request(objects, namespace, second), f"the retry, {second}", timeout=60)
    status = jobs.get("retry")["status"]
    assert status["phase"] == "Queued" and status["restarts"]["total"] == 0 and jobs.pods("retry") == []
    provisioner_says(objects, namespace, second, "Provisioned")
    pods = jobs.wait_pods("retry", 2, phase="Running", timeout=90)
    assert {p.metadata.annotations[CONSUMES] for p in pods} == {second}
    assert jobs.get("retry")["status"]["restarts"] == {"failures": 0, "preemptions": 0, "total": 0}


def test_the_kueue_examples_admit_the_example_job(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str
) -> None:
    docs = [
        d
        for path in sorted((REPO / "examples" / "kueue").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d
    ]
    for doc in docs:
        if doc["kind"] in ("LocalQueue", "DistributedTrainingJob"):
            doc["metadata"]["namespace"] = namespace
    kueue_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    job = next(d for d in docs if d["kind"] == "DistributedTrainingJob")["metadata"]["name"]
    jobs.wait_condition(job, "Admitted", timeout=90)
    count = sum(
        r["count"] for r in next(d for d in docs if d["kind"] == "DistributedTrainingJob")["spec"]["replicas"]
    )
    jobs.wait_pods(job, count, phase="Running", timeout=90)


def test_a_job_that_cannot_start_gives_its_quota_back_and_a_queue_label_that_names_no_queue_is_invalid(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str,
) -> None:  # fmt: skip
    """Admitted, its pods refused by the apiserver (a 422): the Workload Finished as Kueue's jobframework
    finishes one whose job cannot start (FailedToStart), and the ClusterQueue holds nothing for it."""
    job = queued_job("refused", queue)
    env = [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    for replica in job["spec"]["replicas"]:
        replica["template"]["spec"]["containers"][0]["env"] = env
    jobs.create(job)
    invalid = jobs.wait_condition("refused", "Invalid", timeout=90)
    assert invalid["reason"] == "PodRefused", invalid
    finished = wait_for(
        lambda: next((c for c in workload_of(objects, namespace, "refused")["status"]["conditions"]
                      if c["type"] == "Finished" and c["status"] == "True"), None),
        "the Workload of the job that cannot start Finished", timeout=60,
    )  # fmt: skip
    assert finished["reason"] == "FailedToStart" and "spec.containers[0].env[" in finished["message"], (
        finished
    )
    cluster_queue = workload_of(objects, namespace, "refused")["status"]["admission"]["clusterQueue"]
    wait_for(
        lambda: reserving(objects, cluster_queue) == 0, "the ClusterQueue holding no quota for it", timeout=60
    )

    bad = queued_job("badqueue", "Team_A")
    jobs.create(bad)
    invalid = jobs.wait_condition("badqueue", "Invalid", timeout=60)
    assert "kueue.x-k8s.io/queue-name" in invalid["message"] and "'Team_A'" in invalid["message"], invalid
    with pytest.raises(LookupError):
        workload_of(objects, namespace, "badqueue")


def reserving(objects: client.CustomObjectsApi, cluster_queue: str) -> int:
    """How many Workloads hold quota in the ClusterQueue (its status.reservingWorkloads)."""
    found = objects.get_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", cluster_queue)
    return int(found.get("status", {}).get("reservingWorkloads", 0))


def test_a_job_naming_no_priority_class_is_queued_at_the_clusters_global_default(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str,
) -> None:  # fmt: skip
    """Kueue gives such a Workload the globalDefault PriorityClass. Its value here is 0, the priority of a
    pod with no class: the other tests' pods, which the class defaults while it exists, keep theirs. (Of
    two defaults Kueue takes the lowest; the apiserver refuses a second one but for a race, so that case is
    a unit test of kueue_priority.global_default_priority.)"""
    scheduling = client.SchedulingV1Api(objects.api_client)
    name = f"default-{namespace}"
    scheduling.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=0, global_default=True)
    )
    try:
        jobs.create(queued_job("plain", queue))
        spec = wait_for(lambda: workload_of(objects, namespace, "plain")["spec"], "the Workload", timeout=60)
    finally:
        scheduling.delete_priority_class(name)
    assert (spec.get("priorityClassName"), spec.get("priorityClassSource"), spec.get("priority")) == (
        name, "scheduling.k8s.io/priorityclass", 0)  # fmt: skip
    jobs.wait_condition("plain", "Admitted", timeout=60)


def test_a_leftover_workload_of_an_earlier_job_of_the_same_name_does_not_block_the_new_one(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str,
) -> None:  # fmt: skip
    """A job deleted with its Workload orphaned (or created again before the garbage collector took the old
    one's): the new job's Workload is named after its own uid, as Kueue names its integrations' Workloads."""
    jobs.create(queued_job("again", queue))
    leftover = wait_for(
        lambda: workload_of(objects, namespace, "again"), "the first job's Workload", timeout=60
    )
    jobs.api.delete_namespaced_custom_object(
        "training.dtjob.io",
        "v1alpha1",
        namespace,
        "distributedtrainingjobs",
        "again",
        propagation_policy="Orphan",
    )

    def gone() -> bool:
        try:
            jobs.get("again")
        except client.ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, "the first job gone")
    # Its pods as the garbage collector would have taken them (their names are the new job's): only
    # the Workload is left over.
    jobs.core.delete_collection_namespaced_pod(
        namespace,
        label_selector=f"training.dtjob.io/job-uid={leftover['metadata']['labels']['training.dtjob.io/job-uid']}",
        grace_period_seconds=0,
    )
    wait_for(lambda: not jobs.core.list_namespaced_pod(namespace).items, "the first job's pods gone")
    jobs.create(queued_job("again", queue))
    uid = jobs.get("again")["metadata"]["uid"]
    made = wait_for(
        lambda: [w for w in objects.list_namespaced_custom_object(KUEUE, "v1beta1", namespace, "workloads")["items"]
                 if any(o["uid"] == uid for o in w["metadata"].get("ownerReferences") or [])],
        "the new job's own Workload", timeout=60,
    )  # fmt: skip
    assert made[0]["metadata"]["name"] != leftover["metadata"]["name"], made[0]["metadata"]
    # Not "creating its Workload" for ever: Kueue has it (queued, or admitted).
    wait_for(
        lambda: "creating its Workload" not in str(jobs.get("again").get("status", {}).get("conditions")),
        "the job past creating its Workload",
        timeout=60,
    )


def reserved(objects: client.CustomObjectsApi, namespace: str, queue: str) -> dict[str, str]:
    """What Kueue has reserved for the LocalQueue's Workloads, by resource (its status, as Kueue keeps it)."""
    found = objects.get_namespaced_custom_object(KUEUE, "v1beta1", namespace, "localqueues", queue)
    return {
        resource["name"]: str(resource["total"])
        for flavor in found.get("status", {}).get("flavorsReservation") or []
        for resource in flavor.get("resources") or []
        if str(resource["total"]) not in ("0", "")
    }


def test_the_workload_follows_its_job_a_template_changed_while_suspended_and_a_queue_label_removed(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str,
) -> None:  # fmt: skip
    """As Kueue's own integrations keep their Workloads: a template changed while the job is suspended
    reaches the Workload (Kueue counts the new requests, not the old); a queue label removed from a running
    job leaves it in its Workload's queue (the quota stays counted until it ends); one removed from a queued
    job takes its Workload away, and the job runs without Kueue."""
    jobs.create(queued_job("follow", queue))
    first = {p.metadata.uid for p in jobs.wait_pods("follow", 2, phase="Running", timeout=90)}
    wait_for(lambda: reserved(objects, namespace, queue) == {"nvidia.com/gpu": "16"}, "16 GPUs reserved")
    jobs.patch("follow", {"spec": {"runPolicy": {"suspend": True}}})
    wait_for(lambda: jobs.pods("follow") == [] and reserved(objects, namespace, queue) == {},
             "the suspended job's pods gone and its quota handed back", timeout=60)  # fmt: skip
    replicas = jobs.get("follow")["spec"]["replicas"]
    for replica in replicas:
        replica["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    jobs.patch("follow", {"spec": {"replicas": replicas}})

    def cpus_a_pod() -> set[str]:
        pod_sets = workload_of(objects, namespace, "follow")["spec"]["podSets"]
        return {
            str(p["template"]["spec"]["containers"][0]["resources"]["requests"].get("cpu")) for p in pod_sets
        }

    wait_for(lambda: cpus_a_pod() == {"3"}, "the Workload to ask for 3 CPUs a pod")
    jobs.patch("follow", {"spec": {"runPolicy": {"suspend": False}}})
    jobs.wait_pods("follow", 2, phase="Running", timeout=90)
    both = {"nvidia.com/gpu": "16", "cpu": "6"}
    wait_for(lambda: reserved(objects, namespace, queue) == both, "16 GPUs and 6 CPUs reserved")

    running = {p.metadata.uid for p in jobs.pods("follow")}
    assert running.isdisjoint(first)
    jobs.patch("follow", {"metadata": {"labels": {f"{KUEUE}/queue-name": None}}})
    admitted = wait_for(
        lambda: (c := jobs.condition("follow", "Admitted")) and "asks for no queue" in c["message"] and c,
        "the job to say it stays in its Workload's queue",
    )
    assert admitted["status"] == "True", admitted
    assert {p.metadata.uid for p in jobs.pods("follow")} == running
    assert reserved(objects, namespace, queue) == both
    sim.exit_pod(client.CoreV1Api(objects.api_client), namespace, "follow-master-0", exit_code=0)
    jobs.wait_condition("follow", "Succeeded")
    wait_for(lambda: reserved(objects, namespace, queue) == {}, "its quota freed once it ended")

    jobs.create(queued_job("astray", "no-such-queue"))
    wait_for(lambda: workload_of(objects, namespace, "astray"), "the queued job's Workload")
    # Recorded as queued first (the Workload is created before the status is written in the same pass).
    jobs.wait_condition("astray", "Queued", status="True")
    jobs.patch("astray", {"metadata": {"labels": {f"{KUEUE}/queue-name": None}}})
    jobs.wait_pods("astray", 2, phase="Running", timeout=60)
    wait_for(lambda: not objects.list_namespaced_custom_object(KUEUE, "v1beta1", namespace, "workloads",
             label_selector="training.dtjob.io/job-name=astray")["items"], "its Workload deleted")  # fmt: skip
    assert jobs.condition("astray", "Queued")["reason"] == "NotQueued"


def test_a_deleted_jobs_workload_holds_its_quota_until_its_last_trainer_is_gone(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str,
) -> None:  # fmt: skip
    """Kueue counts a Workload's quota until the Workload is gone: deleted with its job, it stays (the
    operator's `resource-in-use` finalizer) while a trainer still runs down, and goes with the last one.
    The trainer still saving is a pod held by a finalizer of the test's own."""
    jobs.create(queued_job("held", queue))
    jobs.wait_pods("held", 2, phase="Running", timeout=90)
    wait_for(lambda: reserved(objects, namespace, queue) == {"nvidia.com/gpu": "16"}, "16 GPUs reserved")
    name = workload_of(objects, namespace, "held")["metadata"]["name"]
    saving = {"metadata": {"finalizers": ["test.dtjob.io/saving"]}}
    jobs.core.patch_namespaced_pod("held-master-0", namespace, saving)
    jobs.api.delete_namespaced_custom_object(
        "training.dtjob.io", "v1alpha1", namespace, "distributedtrainingjobs", "held"
    )

    def workload() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = objects.get_namespaced_custom_object(
                KUEUE, "v1beta1", namespace, "workloads", name
            )
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    wait_for(lambda: [p.metadata.name for p in jobs.core.list_namespaced_pod(namespace).items] == ["held-master-0"]
             and (w := workload()) is not None and w["metadata"].get("deletionTimestamp"),
             "the job gone, one trainer and its Workload being deleted", timeout=60)  # fmt: skip
    wait_for(lambda: reserved(objects, namespace, queue) == {"nvidia.com/gpu": "16"}, "the quota still held")
    jobs.core.patch_namespaced_pod("held-master-0", namespace, {"metadata": {"finalizers": None}})  # saved
    wait_for(lambda: workload() is None, "the Workload gone with the last trainer", timeout=60)
    wait_for(lambda: reserved(objects, namespace, queue) == {}, "the quota handed back")


def test_a_priority_class_changed_while_the_job_waits_reaches_its_workload(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str,
) -> None:  # fmt: skip
    """As Kueue's integrations follow a changed priority-class label while the job is not admitted: the job
    waits in a LocalQueue that does not exist, so its Workload never holds quota."""
    apply = kueue_objects(objects)
    for name, value in (("dtjob-test-low", 10), ("dtjob-test-high", 1000)):
        apply("workloadpriorityclasses", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "WorkloadPriorityClass",
                                          "metadata": {"name": name}, "value": value})  # fmt: skip
    jobs.create(queued_job("waits", "no-such-queue", "dtjob-test-low"))
    wait_for(
        lambda: workload_of(objects, namespace, "waits")["spec"].get("priority") == 10, "the Workload at 10"
    )
    jobs.patch("waits", {"metadata": {"labels": {f"{KUEUE}/priority-class": "dtjob-test-high"}}})
    spec = wait_for(
        lambda: (s := workload_of(objects, namespace, "waits")["spec"]) and s.get("priority") == 1000 and s,
        "the Workload at the new class's value",
    )
    assert (spec["priorityClassName"], spec["priorityClassSource"]) == (
        "dtjob-test-high",
        f"{KUEUE}/workloadpriorityclass",
    )


def test_a_job_created_without_a_queue_goes_to_the_namespaces_default_local_queue(
    kueue_cluster: Cluster, operator: KopfRunner, jobs: Jobs, objects: client.CustomObjectsApi, namespace: str,
    queue: str,
) -> None:  # fmt: skip
    """Kueue's LocalQueueDefaulting (on by default since v0.12), as its webhooks apply it to the jobs of its
    own integrations: a job created with no queue label in a namespace with a LocalQueue named `default`
    is queued there. A probe too big for the quota waits in it first, saying the operator has read it."""
    cluster_queue = objects.get_namespaced_custom_object(KUEUE, "v1beta1", namespace, "localqueues", queue)
    cluster_queue_name = cluster_queue["spec"]["clusterQueue"]
    kueue_objects(objects)("localqueues", {"apiVersion": f"{KUEUE}/v1beta1", "kind": "LocalQueue",
                                           "metadata": {"name": "default"},
                                           "spec": {"clusterQueue": cluster_queue_name}}, namespace)  # fmt: skip
    probe = queued_job("probe", "default")
    probe["spec"]["replicas"] = pytorch_job("probe", workers=6, master=True)["spec"][
        "replicas"
    ]  # 56 GPUs > 48
    jobs.create(probe)
    wait_for(lambda: f"(ClusterQueue {cluster_queue_name})" in (jobs.condition("probe", "Queued") or {}).get("message", ""),
             "the operator to know the default LocalQueue", timeout=60)  # fmt: skip
    jobs.delete("probe")
    plain = pytorch_job("plain", workers=1, master=True)
    jobs.create(plain)
    labelled = wait_for(
        lambda: (jobs.get("plain")["metadata"].get("labels") or {}).get(f"{KUEUE}/queue-name"),
        "the queue label",
    )
    assert labelled == "default"
    jobs.wait_condition("plain", "Admitted", timeout=60)
    assert workload_of(objects, namespace, "plain")["spec"]["queueName"] == "default"


def test_the_hygiene_check_fails_the_test_that_left_a_node_open_and_a_workload_admitted_and_the_next_passes(
    kueue_cluster: Cluster, core: client.CoreV1Api, objects: client.CustomObjectsApi, tmp_path: Path
) -> None:
    """The hygiene check (tests/conftest.py) against the real cluster and Kueue: `tests/suite/leaking.py`
    run as the suite runs a Kueue test, in a pytest process of its own (its own locks: this test holds
    the cluster's share). Its first test's fixture leaves a fake node open and an admitted Workload in
    `default`; the check fails that test in its teardown, naming both, and clears them, so its second
    test finds the cluster clean. About 20 s (a pytest start-up, a node and an admission)."""
    index, name = 10_000 + int(uuid.uuid4().hex[:3], 16), f"leaking-{uuid.uuid4().hex[:6]}"
    node = fakenodes.gpu_node(index)["metadata"]["name"]
    env = {**os.environ, "DTJOB_TEST_LOCKS": str(tmp_path / "locks"), "DTJOB_ARTIFACTS": str(tmp_path),
           "DTJOB_KEEP_CLUSTER": "1", "DTJOB_LEAKING_NODE_INDEX": str(index), "DTJOB_LEAKING_NAME": name}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-rA",
         str(REPO / "tests" / "suite" / "leaking.py")],
        cwd=REPO, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=liveness_timeout(180),
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "ERROR tests/suite/leaking.py::test_a_fixture_leaves_a_node_open_and_a_workload_admitted" in out, (
        out
    )
    assert f"node {node}: {hygiene.OPEN_NODE}" in out, out
    assert f"workload default/{name}: left by a test that ended" in out, out
    assert f"workload default/{name}: finalizers removed, deleted" in out, out
    assert "PASSED tests/suite/leaking.py::test_the_next_test_finds_the_cluster_clean" in out, out
    assert node not in [n.metadata.name for n in core.list_node().items]
