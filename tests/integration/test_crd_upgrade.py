"""An upgrade as `helm upgrade` leaves it: the operator meets the CRD of an older release (no schema
revision, without a spec field and a status field it uses). One that may not upgrade it stays unready and
touches no job; one that may, upgrades it, after which the new field is accepted and the status field kept,
and the unready one starts acting on its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dtjob import crd
from dtjob.api import CRD_NAME
from localcluster import Cluster
from tests.support.http import health
from tests.support.jobs import GROUP, PLURAL, VERSION, pytorch_job
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.service_accounts import blind_kubeconfig
from tests.support.waiting import wait_for

# An older CRD replaces the one every other test's jobs are stored under.
pytestmark = pytest.mark.cluster_wide

BROKEN_SINCE = "2030-01-01T00:00:00Z"


def installed_crd(extensions: client.ApiextensionsV1Api) -> dict[str, Any]:
    answer: Any = extensions.read_custom_resource_definition(CRD_NAME, _preload_content=False)
    return dict(json.loads(answer.data))


def install_an_older_release(extensions: client.ApiextensionsV1Api) -> None:
    """The CRD as a release before schema revisions had it: no revision, no failureSettleSeconds in
    runPolicy, no brokenSince in the status. A PUT, so no field of the current one survives it."""
    old = installed_crd(extensions)
    old["metadata"]["annotations"].pop(crd.REVISION_ANNOTATION)
    schema = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    del schema["spec"]["properties"]["runPolicy"]["properties"]["failureSettleSeconds"]
    del schema["status"]["properties"]["brokenSince"]
    extensions.replace_custom_resource_definition(CRD_NAME, old)


def broken_since_kept(objects: client.CustomObjectsApi, namespace: str, name: str) -> bool:
    """Whether the apiserver keeps status.brokenSince on this job (an older schema prunes it)."""
    objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": {"brokenSince": BROKEN_SINCE}}
    )
    status = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get("status") or {}
    return status.get("brokenSince") == BROKEN_SINCE


def operator_process(
    cluster: Cluster, namespace: str, url: str, log: Path, **env: str
) -> subprocess.Popen[bytes]:
    environment = {
        "KUBECONFIG": str(cluster.kubeconfig),
        "PYTHONUNBUFFERED": "1",
        "PATH": "/usr/bin:/bin",
        **env,
    }
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "dtjob.cli", "run", "--namespace", namespace, "--liveness", url],
            cwd=REPO, env=environment, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


@pytest.fixture
def extensions(api_client: client.ApiClient, crd: dict[str, Any]) -> Iterator[client.ApiextensionsV1Api]:
    api = client.ApiextensionsV1Api(api_client)
    yield api
    # Whatever happened, the next test meets this release's CRD.
    current = installed_crd(api)
    wanted = crd.copy()
    wanted["metadata"] = {**crd["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
    api.replace_custom_resource_definition(CRD_NAME, wanted)


def test_an_older_crd_is_refused_without_leave_to_upgrade_and_upgraded_with_it(
    cluster_a: Cluster,
    extensions: client.ApiextensionsV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    objects = client.CustomObjectsApi(api_client)
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, pytorch_job("waiting", workers=1)
    )
    install_an_older_release(extensions)
    # The witness of the harm: once the old schema is in force, the status field is pruned.
    wait_for(
        lambda: not broken_since_kept(objects, namespace, "waiting"), "the old schema pruning brokenSince"
    )
    objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "waiting", {"status": None}
    )

    stale_url = f"http://127.0.0.1:{free_port()}/healthz"
    stale_log = tmp_path / "stale.log"
    stale = operator_process(cluster_a, namespace, stale_url, stale_log, DTJOB_MANAGE_CRD="false")
    try:
        code, body = wait_for(lambda: (a := health(stale_url))[0] not in (0, 200) and a, "/healthz to fail")
        assert code == 500, (code, body)
        said = wait_for(
            lambda: "not acting on any job" in (t := stale_log.read_text()) and t, "the refusal logged"
        )
        assert "is older (no revision) than this operator's" in said, said
        assert "kubectl apply --server-side --force-conflicts" in said, said
        assert health(stale_url)[0] == 500  # still: the refusal, not start-up
        job = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "waiting")
        assert not job.get("status"), job.get("status")  # the job was left alone
        assert crd.REVISION_ANNOTATION not in (installed_crd(extensions)["metadata"].get("annotations") or {})

        # An operator that may upgrade it (another namespace: it acts on none of these jobs).
        upgrading_url = f"http://127.0.0.1:{free_port()}/healthz"
        upgrading_log = tmp_path / "upgrading.log"
        upgrading = operator_process(cluster_a, f"{namespace}-none", upgrading_url, upgrading_log)
        try:
            wait_for(lambda: (a := health(upgrading_url))[0] == 200 and a, "the upgrading operator ready")
        finally:
            upgrading.terminate()
            upgrading.wait(timeout=30)
        assert (
            "upgraded the CRD" in upgrading_log.read_text()
            and "from no revision to revision" in upgrading_log.read_text()
        )
        annotations = installed_crd(extensions)["metadata"]["annotations"]
        assert annotations[crd.REVISION_ANNOTATION] == str(crd.SCHEMA_REVISION)

        # The new spec field is accepted as the user writes it (kubectl validates strictly), the status field kept.
        settled = pytorch_job("settled", workers=1, runPolicy={"failureSettleSeconds": 30})
        manifest = tmp_path / "settled.json"
        manifest.write_text(json.dumps({**settled, "metadata": {"name": "settled", "namespace": namespace}}))
        wait_for(lambda: "created" in cluster_a.kubectl("create", "-f", str(manifest), check=False) or None,
                 "a job with runPolicy.failureSettleSeconds accepted by kubectl create")  # fmt: skip
        wait_for(lambda: broken_since_kept(objects, namespace, "settled") or None, "status.brokenSince kept")

        # The refused operator looks again on its own and acts on the waiting job.
        wait_for(lambda: (a := health(stale_url))[0] == 200 and a, "the refused operator ready", timeout=60)
        wait_for(
            lambda: (objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "waiting").get("status")
                     or {}).get("attempt"),
            "the waiting job reconciled",
        )  # fmt: skip
    finally:
        stale.terminate()
        stale.wait(timeout=30)


def test_an_operator_that_may_not_patch_an_older_crd_stays_unready_and_says_why(
    cluster_a: Cluster,
    extensions: client.ApiextensionsV1Api,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    """manageCRD on, but RBAC narrower than the chart's (the CRD may be read, not patched): no job is acted
    on, and the refusal says the patch was forbidden, not only that the CRD is old."""
    kubeconfig = blind_kubeconfig(cluster_a, core, namespace, tmp_path / "blind.kubeconfig")
    rbac = client.RbacAuthorizationV1Api(api_client)
    name = f"read-crd-{namespace}"
    rule: Any = {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                 "resourceNames": [CRD_NAME], "verbs": ["get"]}  # fmt: skip
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [rule]})
    binding: Any = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "blind", "namespace": namespace}],
    }
    rbac.create_cluster_role_binding(binding)
    install_an_older_release(extensions)
    url = f"http://127.0.0.1:{free_port()}/healthz"
    log = tmp_path / "operator.log"
    process = operator_process(cluster_a, namespace, url, log, KUBECONFIG=str(kubeconfig))
    try:
        wait_for(lambda: (a := health(url))[0] == 500 and a, "/healthz to fail")
        said = wait_for(lambda: "not acting on any job" in (t := log.read_text()) and t, "the refusal logged")
        assert "may not patch the CRD: Forbidden" in said, said
        assert crd.REVISION_ANNOTATION not in (installed_crd(extensions)["metadata"].get("annotations") or {})
    finally:
        process.terminate()
        process.wait(timeout=30)
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
