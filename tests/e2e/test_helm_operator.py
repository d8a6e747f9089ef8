"""The operator as users run it: its image built from operator/Dockerfile, installed with the Helm chart,
talking to the apiserver through its ServiceAccount (tier C: the operator pod runs on the real node; the
training pods go to kwok's fake GPU nodes, where the test plays the kubelet)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from hack import images
from localcluster import Cluster, sim
from tests.support.chart import CHART
from tests.support.helm_release import RELEASE, helm, operator_pod
from tests.support.jobs import Jobs, pytorch_job
from tests.support.waiting import wait_for


@pytest.fixture
def operator_image(cluster_c: Cluster) -> str:
    return images.ensure(cluster_c, images.OPERATOR)


@pytest.fixture
def installed(
    cluster_c: Cluster, crd: dict[str, Any], operator_image: str, namespace: str, core: client.CoreV1Api
) -> Iterator[client.V1Pod]:
    """The chart installed into the test namespace, watching only that namespace."""
    repository, tag = operator_image.rsplit(":", 1)
    values = ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
              "--set", f"watchNamespaces={{{namespace}}}"]  # fmt: skip
    helm(cluster_c, "install", RELEASE, str(CHART), "-n", namespace, *values, "--wait", "--timeout", "3m")
    try:
        yield operator_pod(core, namespace)
    finally:
        helm(cluster_c, "uninstall", RELEASE, "-n", namespace, "--wait")


def metrics(pod: client.V1Pod) -> str:
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:8080/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def assert_allowed(log: str) -> None:
    """Everything the operator did, the chart's least-privilege RBAC allowed."""
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]


def test_helm_installed_operator_runs_a_job_survives_an_upgrade_and_uninstall_keeps_jobs(
    cluster_c: Cluster, installed: client.V1Pod, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    assert installed.spec.service_account_name == "dtjob-dtjob-operator"
    job = pytorch_job("helm-ddp", workers=2)
    del job["spec"]["nccl"]  # Auto: the operator lists the cluster's GKE Networks under the chart's RBAC
    jobs.create(job)
    before = {p.metadata.name: p.metadata.uid for p in jobs.wait_pods("helm-ddp", 2, phase="Running")}
    jobs.wait_condition("helm-ddp", "Running")
    assert jobs.get("helm-ddp")["status"]["nccl"]["profile"] == "TCP"  # this cluster has none
    assert_allowed(core.read_namespaced_pod_log(installed.metadata.name, namespace))

    # An upgrade replaces the operator pod; the running job's pods are left alone.
    repository, tag = images.OPERATOR.ref.rsplit(":", 1)
    helm(cluster_c, "upgrade", RELEASE, str(CHART), "-n", namespace, "--reuse-values",
         "--set", "logLevel=debug", "--wait", "--timeout", "3m")  # fmt: skip
    upgraded = operator_pod(core, namespace)
    assert upgraded.metadata.uid != installed.metadata.uid
    assert {p.metadata.name: p.metadata.uid for p in jobs.pods("helm-ddp")} == before
    assert jobs.get("helm-ddp")["status"]["phase"] == "Running"

    sim.exit_pod(core, namespace, "helm-ddp-worker-0", exit_code=0)
    jobs.wait_condition("helm-ddp", "Succeeded")

    # The metrics endpoint tells what happened, through the upgraded operator.
    def succeeded_in_metrics() -> str | None:
        text = metrics(upgraded)
        return text if 'phase="Succeeded"' in text else None

    text = wait_for(succeeded_in_metrics, "the Succeeded job in the metrics")
    assert f'dtjob_jobs{{framework="PyTorch",namespace="{namespace}",phase="Succeeded"}} 1.0' in text
    assert "dtjob_reconcile_duration_seconds_count" in text

    assert_allowed(core.read_namespaced_pod_log(upgraded.metadata.name, namespace))

    # Uninstalling the operator leaves the CRD and the jobs (and their data) in place.
    helm(cluster_c, "uninstall", RELEASE, "-n", namespace, "--wait")
    assert cluster_c.kubectl("get", "crd", "distributedtrainingjobs.training.dtjob.io", "-o", "name")
    assert jobs.get("helm-ddp")["status"]["phase"] == "Succeeded"
    assert [p.metadata.name for p in jobs.pods("helm-ddp")] == ["helm-ddp-worker-0"]
    helm(
        cluster_c,
        "install",
        RELEASE,
        str(CHART),
        "-n",
        namespace,
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        f"watchNamespaces={{{namespace}}}",
    )  # fmt: skip  (for the fixture's uninstall)
