"""The operator against a real apiserver, with kwok playing the kubelet on fake GKE GPU nodes (tier B)."""

from __future__ import annotations

import json
from typing import Any

from kopf.testing import KopfRunner
from kubernetes import client

from localcluster import Cluster, sim
from tests.support.jobs import JOB_LABEL, Jobs, pytorch_job
from tests.support.operator import running_operator
from tests.support.reads import wait_status
from tests.support.waiting import wait_for


def env_of(pod: client.V1Pod) -> dict[str, str]:
    container = next(c for c in pod.spec.containers if c.name == "trainer")
    return {e.name: e.value for e in container.env or []}


def test_a_job_creates_exactly_its_headless_service_and_one_pod_per_replica(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    job = jobs.create(pytorch_job("mnist", workers=3, master=True))
    pods = jobs.wait_pods("mnist", 4)
    assert [p.metadata.name for p in pods] == [
        "mnist-master-0",
        "mnist-worker-0",
        "mnist-worker-1",
        "mnist-worker-2",
    ]
    service = core.read_namespaced_service("mnist", namespace)
    assert service.spec.cluster_ip == "None"
    assert service.spec.publish_not_ready_addresses is True
    for pod in pods:
        assert pod.spec.hostname == pod.metadata.name and pod.spec.subdomain == "mnist"
        assert pod.spec.restart_policy == "Never"
        owner = pod.metadata.owner_references[0]
        assert (owner.uid, owner.controller, owner.block_owner_deletion) == (
            job["metadata"]["uid"],
            True,
            True,
        )
        assert pod.metadata.labels[JOB_LABEL] == "mnist"
        assert pod.spec.node_selector["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    env = {p.metadata.name: env_of(p) for p in pods}
    assert env["mnist-master-0"]["RANK"] == "0" and env["mnist-worker-2"]["RANK"] == "3"
    assert {e["WORLD_SIZE"] for e in env.values()} == {"4"}
    assert env["mnist-worker-0"]["MASTER_ADDR"].startswith("mnist-master-0.mnist")
    # Exactly these children: nothing else carries the job's label.
    assert len(core.list_namespaced_service(namespace, label_selector=f"{JOB_LABEL}=mnist").items) == 1


def test_running_pods_make_the_job_running_and_rank_zero_success_completes_it(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(pytorch_job("ddp", workers=3))
    jobs.wait_pods("ddp", 3, phase="Running")
    jobs.wait_condition("ddp", "Running")
    status = wait_for(lambda: (s := jobs.get("ddp")["status"]).get("replicaStatuses") and
                      s["replicaStatuses"][0].get("ready") == 3 and s, "3 ready workers in the status")  # fmt: skip
    assert status["phase"] == "Running"
    sim.exit_pod(core, namespace, "ddp-worker-0", exit_code=0)
    done = jobs.wait_condition("ddp", "Succeeded")
    assert done["reason"]
    # cleanPodPolicy Running (the default): the workers still running are deleted, the finished one kept.
    remaining = jobs.wait_pods("ddp", 1)
    assert remaining[0].metadata.name == "ddp-worker-0"
    assert jobs.get("ddp")["status"]["phase"] == "Succeeded"
    assert jobs.get("ddp")["status"].get("completionTime")


def test_deleting_the_job_cascades_to_its_children(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(pytorch_job("doomed", workers=2))
    jobs.wait_pods("doomed", 2)
    jobs.delete("doomed")
    wait_for(lambda: not jobs.pods("doomed"), "the garbage collector to delete the pods", timeout=60)
    wait_for(lambda: not core.list_namespaced_service(namespace, label_selector=f"{JOB_LABEL}=doomed").items,
             "the garbage collector to delete the service", timeout=60)  # fmt: skip


def test_an_edited_managed_field_of_a_child_drifts_back(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(pytorch_job("drift", workers=1))
    jobs.wait_pods("drift", 1)
    core.patch_namespaced_service("drift", namespace, {"spec": {"publishNotReadyAddresses": False}})
    core.patch_namespaced_pod(
        "drift-worker-0", namespace, {"metadata": {"labels": {"training.dtjob.io/role": "hacked"}}}
    )

    def restored() -> bool:
        pod = core.read_namespaced_pod("drift-worker-0", namespace)
        svc = core.read_namespaced_service("drift", namespace)
        return (
            pod.metadata.labels["training.dtjob.io/role"] != "hacked"
            and svc.spec.publish_not_ready_addresses is True
        )

    wait_for(restored, "the operator to re-apply the edited fields", timeout=60)


def test_restarting_the_operator_mid_way_creates_no_duplicates(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    with running_operator(cluster_b, namespace):
        jobs.create(pytorch_job("restart", workers=4))
        jobs.wait_pods("restart", 4)
    # The operator is gone; a pod finishes meanwhile, then a new operator takes over.
    sim.exit_pod(core, namespace, "restart-worker-0", exit_code=0)
    with running_operator(cluster_b, namespace):
        jobs.wait_condition("restart", "Succeeded")
        names = [p.metadata.name for p in core.list_namespaced_pod(namespace).items]
        assert len(names) == len(set(names)) and all(n.startswith("restart-worker-") for n in names)
        assert len(core.list_namespaced_service(namespace).items) == 1


def test_suspend_deletes_the_pods_and_keeps_the_job_and_resume_recreates_them(
    operator: KopfRunner, jobs: Jobs, namespace: str
) -> None:
    jobs.create(pytorch_job("pause", workers=2))
    jobs.wait_pods("pause", 2, phase="Running")
    jobs.patch("pause", {"spec": {"runPolicy": {"suspend": True}}})
    jobs.wait_condition("pause", "Suspended")
    jobs.wait_pods("pause", 0)
    assert jobs.get("pause")["status"]["phase"] == "Suspended"
    jobs.patch("pause", {"spec": {"runPolicy": {"suspend": False}}})
    jobs.wait_pods("pause", 2, phase="Running")
    jobs.wait_condition("pause", "Suspended", status="False")


def test_ttl_after_finished_deletes_the_job(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(pytorch_job("brief", workers=1, runPolicy={"ttlSecondsAfterFinished": 2}))
    jobs.wait_pods("brief", 1, phase="Running")
    sim.exit_pod(core, namespace, "brief-worker-0", exit_code=0)

    def gone() -> bool:
        try:
            jobs.get("brief")
        except client.ApiException as err:
            return err.status == 404
        return False

    wait_for(gone, "the TTL to delete the finished job", timeout=60)


def test_active_deadline_fails_the_job_and_removes_its_pods(operator: KopfRunner, jobs: Jobs) -> None:
    jobs.create(pytorch_job("slow", workers=2, runPolicy={"activeDeadlineSeconds": 3}))
    jobs.wait_pods("slow", 2, phase="Running")
    failed = jobs.wait_condition("slow", "Failed", timeout=60)
    assert failed["reason"] == "DeadlineExceeded"
    jobs.wait_pods("slow", 0)


def test_two_jobs_in_one_namespace_never_touch_each_others_pods(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(pytorch_job("left", workers=2))
    jobs.create(pytorch_job("right", workers=2))
    left = jobs.wait_pods("left", 2, phase="Running")
    right_uids = {p.metadata.uid for p in jobs.wait_pods("right", 2, phase="Running")}
    sim.exit_pod(core, namespace, "left-worker-0", exit_code=0)
    jobs.wait_condition("left", "Succeeded")
    jobs.wait_pods("left", 1)
    assert {p.metadata.uid for p in jobs.pods("right")} == right_uids
    assert jobs.condition("right", "Succeeded") is None
    assert left[0].metadata.labels[JOB_LABEL] == "left"


def test_kubectl_shows_the_printer_columns_and_waits_for_success(
    operator: KopfRunner, cluster_b: Cluster, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(pytorch_job("cols", workers=2))
    jobs.wait_pods("cols", 2, phase="Running")
    jobs.wait_condition("cols", "Running")
    table = cluster_b.kubectl("-n", namespace, "get", "dtj")
    header = table.splitlines()[0].split()
    assert header[:1] == ["NAME"] and {"FRAMEWORK", "PHASE", "AGE"} <= set(header), table
    assert "PyTorch" in table and "Running" in table
    sim.exit_pod(core, namespace, "cols-worker-0", exit_code=0)
    cluster_b.kubectl("-n", namespace, "wait", "--for=condition=Succeeded", "dtj/cols", "--timeout=60s")
    assert (
        json.loads(cluster_b.kubectl("-n", namespace, "get", "dtj", "cols", "-o", "json"))["status"]["phase"]
        == "Succeeded"
    )


def test_a_job_deleted_and_created_again_under_its_name_gets_a_loop_of_its_own(
    operator: KopfRunner, jobs: Jobs, namespace: str
) -> None:
    """The first job's loop ends with it; the namesake (a new uid) is run afresh, from attempt 1."""
    jobs.create(pytorch_job("again"))
    first = {p.metadata.uid for p in jobs.wait_pods("again", 2, phase="Running")}
    first_uid = jobs.get("again")["metadata"]["uid"]
    jobs.delete("again")
    wait_for(lambda: jobs.pods("again") == [] or None, "the first job's pods collected", timeout=60)
    jobs.create(pytorch_job("again", workers=3))
    second = {p.metadata.uid for p in jobs.wait_pods("again", 3, phase="Running")}
    job = jobs.get("again")
    assert job["metadata"]["uid"] != first_uid and not first & second
    # Its first pass creates the pods, then writes the status: the pods may run before it lands.
    status = wait_status(jobs, "again", lambda s: "attempt" in s, "the first pass's record")
    assert status["attempt"] == 1 and status["restarts"]["total"] == 0
    assert all(p.metadata.owner_references[0].uid == job["metadata"]["uid"] for p in jobs.pods("again"))
