"""Record, then act, as users run the operator: two replicas installed by the Helm chart (tier C: the
operator pods on the real node, the training pods on kwok's GPU nodes, the test their kubelet), with the
fault hook on (`DTJOB_FAULT_HOOK=exit` through the chart's `extraEnv`): the leader dies, as under SIGKILL,
between the first write of a pass that decides to delete children and the next write, and the standby
takes over from what the apiserver holds.

The passes that could leave a member gone that no status accounts for, each a case: a job that succeeds
under `cleanPodPolicy: All` (deleting rank 0's pod first made the next leader take it for vanished: a
failure charged, and the job trained again), and an elastic gang's preempted member replaced (deleted
first, the next leader recorded it as vanished, not preempted). Suspension, deadlines and spare clean-up
delete in a pass too, but their rules come before the abnormal-end rule (a spare is no member), so a
leader lost there leaves nothing to misread; the Writer's order covers them all the same.

About two minutes: each case installs the chart and waits for a standby to take over a Lease its holder never handed back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dtjob.kube.fault import FAULT_LABEL
from hack import images
from localcluster import Cluster, sim
from tests.support.chart import CHART
from tests.support.helm_release import RELEASE, helm
from tests.support.jobs import Jobs, gang_of_attempt, pytorch_job, status_of
from tests.support.waiting import wait_for

OPERATOR_PODS = "app.kubernetes.io/name=dtjob-operator"
SETTLED = {"failureSettleSeconds": 0}


def operator_restarts(core: client.CoreV1Api, namespace: str) -> int:
    pods = core.list_namespaced_pod(namespace, label_selector=OPERATOR_PODS).items
    return sum(s.restart_count for p in pods for s in p.status.container_statuses or [])


@pytest.fixture
def two_replicas(
    cluster_c: Cluster, crd: dict[str, Any], namespace: str, core: client.CoreV1Api
) -> Iterator[None]:
    """The chart with two operator pods on one Lease, the fault hook on, watching this namespace only."""
    repository, tag = images.ensure(cluster_c, images.OPERATOR).rsplit(":", 1)
    helm(cluster_c, "install", RELEASE, str(CHART), "-n", namespace,
         "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
         "--set", f"watchNamespaces={{{namespace}}}", "--set", "replicas=2",
         "--set", "extraEnv[0].name=DTJOB_FAULT_HOOK", "--set", "extraEnv[0].value=exit",
         "--wait", "--timeout", "3m")  # fmt: skip
    try:
        yield
    finally:
        helm(cluster_c, "uninstall", RELEASE, "-n", namespace, "--wait")


def labelled(job: dict[str, Any]) -> dict[str, Any]:
    job["metadata"]["labels"] = {FAULT_LABEL: "true"}
    return job


def hook_fired(core: client.CoreV1Api, namespace: str, before: int) -> None:
    """Until a replica has died of the hook (its container restarted)."""
    wait_for(
        lambda: operator_restarts(core, namespace) > before or None, "the leader to die mid-pass", timeout=60
    )


def ended_or_restarted(jobs: Jobs, name: str) -> dict[str, Any] | None:
    """The job's status once it ended, or once it started a second attempt (what a phantom failure does)."""
    status = status_of(jobs, name)
    return status if status.get("phase") in ("Succeeded", "Failed") or status.get("attempt", 1) > 1 else None


def test_a_job_that_succeeds_under_clean_pod_policy_all_is_not_charged_a_failure_nor_trained_again(
    cluster_c: Cluster, two_replicas: None, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(labelled(pytorch_job("cleaned", workers=2, runPolicy={"cleanPodPolicy": "All", **SETTLED})))
    gang = gang_of_attempt(jobs, "cleaned", 1, 2, timeout=120)
    before = operator_restarts(core, namespace)
    for pod in reversed(gang):  # rank 0 last, as a gang ends
        sim.exit_pod(core, namespace, pod.metadata.name, exit_code=0)
    hook_fired(core, namespace, before)
    ended = wait_for(lambda: ended_or_restarted(jobs, "cleaned"), "the job to end", timeout=120)
    assert (ended["phase"], ended["attempt"], ended.get("restarts", {}).get("failures", 0)) == (
        "Succeeded",
        1,
        0,
    )
    wait_for(lambda: jobs.pods("cleaned") == [] or None, "the pods cleaned up", timeout=60)


def test_an_elastic_gangs_replacement_is_recorded_as_the_preemption_it_was(
    cluster_c: Cluster, two_replicas: None, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    elastic = {"torch": {"elastic": {"minReplicas": 2}}}
    jobs.create(labelled(pytorch_job("elastic", workers=3, runPolicy=SETTLED, **elastic)))
    gang = gang_of_attempt(jobs, "elastic", 1, 3, timeout=120)
    lost = next(p for p in gang if p.metadata.name == "elastic-worker-2")
    before = operator_restarts(core, namespace)
    sim.preempt_pod(core, namespace, lost.metadata.name)
    hook_fired(core, namespace, before)
    wait_for(lambda: any(p.metadata.name == lost.metadata.name and p.metadata.uid != lost.metadata.uid
                         and p.status.phase == "Running" for p in jobs.pods("elastic")) or None,
             "the replacement running", timeout=120)  # fmt: skip
    status = status_of(jobs, "elastic")
    [replaced] = status["elastic"]["replaced"]
    assert (replaced["pod"], replaced["uid"], replaced["reason"]) == (
        lost.metadata.name,
        lost.metadata.uid,
        "Preempted",
    )
    assert (status["attempt"], status["restarts"].get("failures", 0), status["restarts"]["replacements"]) == (
        1,
        0,
        1,
    )
