"""The operator's readers against a real apiserver: one that is refused (RBAC) makes the operator unready
instead of leaving it waiting forever behind a green health check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from localcluster import Cluster
from tests.support.http import health
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.service_accounts import blind_kubeconfig
from tests.support.waiting import wait_for


def test_an_operator_that_may_not_list_nodes_reports_itself_unready_and_says_why(
    cluster_a: Cluster, crd: dict[str, Any], core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = blind_kubeconfig(cluster_a, core, namespace, tmp_path / "blind.kubeconfig")
    url = f"http://127.0.0.1:{free_port()}/healthz"
    env = {"KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin"}
    log = tmp_path / "operator.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dtjob.cli", "run", "--namespace", namespace, "--liveness", url],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        status, body = wait_for(
            lambda: (answer := health(url))[0] not in (0, 200) and answer, "/healthz to fail", timeout=60
        )
        assert status == 500, (status, body)
    finally:
        process.terminate()
        process.wait(timeout=30)
    said = log.read_text()
    assert "cannot read nodes (never listed" in said and "forbidden" in said, said[-3000:]


def test_an_operator_that_may_list_everything_reports_itself_ready(
    cluster_a: Cluster, crd: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}/healthz"
    env = {"KUBECONFIG": str(cluster_a.kubeconfig), "PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin"}
    with (tmp_path / "operator.log").open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dtjob.cli", "run", "--namespace", namespace, "--liveness", url],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _, body = wait_for(lambda: (a := health(url))[0] == 200 and "listed" in a[1] and a, "ready")
        assert json.loads(body)["readers"] == "listed"
    finally:
        process.terminate()
        process.wait(timeout=30)
