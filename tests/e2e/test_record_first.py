"""Record, then act, as users run the operator: two replicas installed by the Helm chart (tier C: the
operator pods on the real node, the training pods on kwok's GPU nodes, the test their kubelet), with the
fault hook on (`DTJOB_FAULT_HOOK=exit` through the chart's `extraEnv`): the leader dies, as under SIGKILL,
between the first write of a pass that decides to delete children and the next write, and the standby
takes over from what the apiserver holds. Each kind of pass that deletes children is a case, run in turn
on one install, each costing one replica its life:

- a job that succeeds under `cleanPodPolicy: All`: deleting rank 0's pod first made the next leader take
  it for vanished (a failure charged, and the job trained again);
- an elastic gang's preempted member replaced: deleted first, the next leader recorded it as vanished,
  not preempted;
- a suspension and a deadline (activeDeadlineSeconds): their rules come before the abnormal-end rule, so
  a leader lost there leaves nothing to misread even with the deletes first; their cases hold the
  Writer's order to the same outcome all the same. (A hot spare's clean-up deletes no member: no case.)

About two and a half minutes (one install, then each case waits for a standby to take over a Lease its
holder never handed back): the one test of the leader lost inside a pass, with the chart as users run it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


class Case:
    """One job through one deleting pass: `start` creates it and waits for its gang, `trigger` makes the
    operator decide the deletes, `outcome` says what went wrong once the standby carried on (None: nothing)."""

    def __init__(self, jobs: Jobs, core: client.CoreV1Api, namespace: str) -> None:
        self.jobs, self.core, self.namespace = jobs, core, namespace

    def create(self, job: dict[str, Any], workers: int) -> list[client.V1Pod]:
        job["metadata"]["labels"] = {FAULT_LABEL: "true"}
        self.jobs.create(job)
        return gang_of_attempt(self.jobs, job["metadata"]["name"], 1, workers, timeout=120)

    def ended(self, name: str) -> dict[str, Any]:
        """The job's status once it ended, or once it started a second attempt (what a phantom failure does)."""

        def ended_or_restarted() -> dict[str, Any] | None:
            status = status_of(self.jobs, name)
            return (
                status
                if status.get("phase") in ("Succeeded", "Failed") or status.get("attempt", 1) > 1
                else None
            )

        return wait_for(ended_or_restarted, f"{name} to end", timeout=120)

    def gone(self, name: str) -> None:
        wait_for(lambda: self.jobs.pods(name) == [] or None, f"{name}'s pods to go", timeout=60)

    def cleaned(self, fired: Callable[[], None]) -> object:
        gang = self.create(
            pytorch_job("cleaned", workers=2, runPolicy={"cleanPodPolicy": "All", **SETTLED}), 2
        )
        for pod in reversed(gang):  # rank 0 last, as a gang ends
            sim.exit_pod(self.core, self.namespace, pod.metadata.name, exit_code=0)
        fired()
        status = self.ended("cleaned")
        self.gone("cleaned")
        got = (status["phase"], status["attempt"], status.get("restarts", {}).get("failures", 0))
        return None if got == ("Succeeded", 1, 0) else got

    def replaced(self, fired: Callable[[], None]) -> object:
        elastic = {"torch": {"elastic": {"minReplicas": 2}}}
        gang = self.create(pytorch_job("elastic", workers=3, runPolicy=SETTLED, **elastic), 3)
        lost = next(p for p in gang if p.metadata.name == "elastic-worker-2")
        sim.preempt_pod(self.core, self.namespace, lost.metadata.name)
        fired()
        wait_for(lambda: any(p.metadata.name == lost.metadata.name and p.metadata.uid != lost.metadata.uid
                             and p.status.phase == "Running" for p in self.jobs.pods("elastic")) or None,
                 "the replacement running", timeout=120)  # fmt: skip
        status = status_of(self.jobs, "elastic")
        [replaced] = status["elastic"]["replaced"]
        got = (replaced["uid"], replaced["reason"], status["attempt"], status["restarts"].get("failures", 0))
        return None if got == (lost.metadata.uid, "Preempted", 1, 0) else got

    def suspended(self, fired: Callable[[], None]) -> object:
        self.create(pytorch_job("suspended", workers=2, runPolicy=SETTLED), 2)
        self.jobs.patch("suspended", {"spec": {"runPolicy": {"suspend": True}}})
        fired()
        self.jobs.wait_condition("suspended", "Suspended", timeout=120)
        self.gone("suspended")
        restarts = status_of(self.jobs, "suspended").get("restarts", {})
        return None if restarts.get("total", 0) == 0 else restarts

    def deadline(self, fired: Callable[[], None]) -> object:
        self.create(pytorch_job("deadline", workers=2, runPolicy={"activeDeadlineSeconds": 30, **SETTLED}), 2)
        fired()
        status = self.ended("deadline")
        self.gone("deadline")
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        got = (failed["reason"], status["attempt"], status.get("restarts", {}).get("total", 0))
        return None if got == ("DeadlineExceeded", 1, 0) else got


def test_every_kind_of_deleting_pass_survives_its_leader_dying_between_its_writes(
    cluster_c: Cluster, two_replicas: None, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    case = Case(jobs, core, namespace)
    wrong: dict[str, object] = {}
    for name, run in {"cleaned": case.cleaned, "replaced": case.replaced, "suspended": case.suspended,
                      "deadline": case.deadline}.items():  # fmt: skip
        before = operator_restarts(core, namespace)

        def fired(before: int = before) -> None:
            """Until a replica has died of the hook (its container restarted)."""
            wait_for(lambda: operator_restarts(core, namespace) > before or None, "the leader to die mid-pass",
                     timeout=90)  # fmt: skip

        try:
            if (got := run(fired)) is not None:
                wrong[name] = got
        except AssertionError as failed:  # a case that never reached its end: the next ones still run
            wrong[name] = str(failed)[:300]
    assert wrong == {}, wrong
