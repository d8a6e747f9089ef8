"""The operator installed with the Helm chart in a cluster: helm against it, and the operator's pod."""

from __future__ import annotations

import subprocess

from kubernetes import client

from localcluster import Cluster
from tests.support.waiting import wait_for

RELEASE = "dtjob"


def helm_answer(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """helm against the cluster, whatever it answers."""
    return subprocess.run(
        [*cluster.helm_command(), *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def helm(cluster: Cluster, *args: str) -> str:
    proc = helm_answer(cluster, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def operator_pod(core: client.CoreV1Api, namespace: str) -> client.V1Pod:
    def ready() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/name=dtjob-operator"
        ).items
        live = [p for p in pods if not p.metadata.deletion_timestamp]
        if len(live) == 1 and any(
            c.type == "Ready" and c.status == "True" for c in live[0].status.conditions or []
        ):
            return live[0]
        return None

    return wait_for(ready, "the operator pod to be Ready", timeout=120)
