"""Argo CD's health check (examples/argocd/health-check.yaml, patched into an argocd-cm ConfigMap with
kubectl as the docs say) against the statuses the operator writes (tier B, the test playing the kubelet
of kwok's fake GPU nodes): one job in each state a user meets, each judged as Argo CD would judge it, the
object read back from the apiserver as Argo CD reads it; `kubectl wait` on the same jobs."""

from __future__ import annotations

from kopf.testing import KopfRunner
from kubernetes import client

from localcluster import Cluster, sim
from tests.support.argocd_health import HEALTH_CHECK, HEALTH_KEY, example_script, health
from tests.support.jobs import Jobs, gang_job, gang_of_attempt


def test_each_state_of_a_job_gets_the_health_argo_cd_should_show(
    cluster_b: Cluster, operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    argocd_cm = {"metadata": {"name": "argocd-cm"}, "data": {"url": "https://argocd.example.com"}}
    core.create_namespaced_config_map(namespace, argocd_cm)
    cluster_b.kubectl("-n", namespace, "patch", "configmap", "argocd-cm", "--patch-file", str(HEALTH_CHECK))
    data = core.read_namespaced_config_map("argocd-cm", namespace).data
    assert data["url"] == "https://argocd.example.com" and data[HEALTH_KEY] == example_script()

    def judged(name: str) -> tuple[str, str]:
        return health(jobs.get(name), data[HEALTH_KEY])

    refused = gang_job("refused")
    refused["spec"]["replicas"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "A", "valueFrom": "x"}
    ]
    stuck = gang_job("stuck")
    stuck["spec"]["replicas"][0]["template"]["spec"]["nodeSelector"] = {"pool": "none-such"}
    for job in (
        gang_job("running"),
        gang_job("done"),
        gang_job("broken", runPolicy={"restartPolicy": "Never"}),
        gang_job("settling", runPolicy={"failureSettleSeconds": 600}),
        gang_job("paused", runPolicy={"suspend": True}),
        refused,
        stuck,
    ):
        jobs.create(job)
    for name in ("running", "done", "broken", "settling"):
        gang_of_attempt(jobs, name, 1, 2)
    sim.exit_pod(core, namespace, "done-worker-0", 0)
    sim.exit_pod(core, namespace, "broken-worker-1", 1)
    sim.exit_pod(core, namespace, "settling-worker-1", 1)

    jobs.wait_condition("running", "Running")
    assert judged("running") == (
        "Progressing",
        "Running (attempt 1): 2/2 pods of attempt 1 are running",
    )
    cluster_b.kubectl("-n", namespace, "wait", "--for=condition=Succeeded", "dtj/done", "--timeout=60s")
    assert judged("done") == ("Healthy", "rank-0 pod done-worker-0 succeeded")
    cluster_b.kubectl(
        "-n", namespace, "wait", "--for=jsonpath={.status.phase}=Failed", "dtj/broken", "--timeout=60s"
    )
    status, message = judged("broken")
    assert (status, message.split(",")[0]) == ("Degraded", "PodFailed: pod broken-worker-1: Error"), message
    jobs.wait_condition("settling", "Restarting")
    status, message = judged("settling")
    assert status == "Progressing" and message.startswith(
        "Restarting (attempt 1): pod settling-worker-1: Error"
    )
    assert "watching the gang for a disruption for up to 600s" in message
    jobs.wait_condition("paused", "Suspended")
    assert judged("paused") == ("Suspended", "the job is suspended: its pods are deleted")
    jobs.wait_condition("refused", "Invalid")
    status, message = judged("refused")
    assert status == "Degraded" and "spec.containers[0].env[" in message, message
    jobs.wait_condition("stuck", "Unschedulable")
    status, message = judged("stuck")
    assert status == "Progressing" and message.startswith("Pending (attempt 1): "), message
    assert "didn't match Pod's node affinity/selector" in message, message
