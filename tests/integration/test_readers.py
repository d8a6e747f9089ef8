"""The operator's readers against a real apiserver: one that is refused (RBAC) makes the operator unready
instead of leaving it waiting forever behind a green health check."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from localcluster import Cluster
from tests.integration.conftest import GROUP, REPO
from tests.ports import free_port
from tests.waiting import wait_for

ISSUER = "https://kubernetes.default.svc.cluster.local"  # the local cluster's --service-account-issuer


def blind_kubeconfig(cluster: Cluster, core: client.CoreV1Api, namespace: str, path: Path) -> Path:
    """A kubeconfig for a ServiceAccount that may do everything the operator does in `namespace` but
    read nodes (a Role only: nodes are cluster-scoped)."""
    rbac = client.RbacAuthorizationV1Api(core.api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "blind"}})
    rules: Any = [
        {"apiGroups": [""], "resources": ["pods", "services", "events"], "verbs": ["*"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["*"]},
        {"apiGroups": [GROUP], "resources": ["*"], "verbs": ["*"]},
    ]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "blind"}, "rules": rules})
    binding: Any = {
        "metadata": {"name": "blind"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "blind"},
        "subjects": [{"kind": "ServiceAccount", "name": "blind", "namespace": namespace}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)
    request: Any = {"spec": {"audiences": [ISSUER], "expirationSeconds": 3600}}
    token = core.create_namespaced_service_account_token("blind", namespace, request).status.token
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "blind", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "blind"
    path.write_text(yaml.safe_dump(config))
    return path


def health(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:  # not serving yet
        return 0, str(err)


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
