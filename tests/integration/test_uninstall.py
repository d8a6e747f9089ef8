"""Uninstall and deletion without a running operator: nothing of dtjob's holds a job, its pods or its
namespace back. The job carries no finalizer, its children are its own by ownerReference (the garbage
collector removes them), and a finalizer an older version put on a job is removed by the operator."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client

from localcluster import Cluster
from tests.support.jobs import GROUP, PLURAL, VERSION, Jobs, pytorch_job
from tests.support.namespaces import create_namespace
from tests.support.operator import running_operator
from tests.support.waiting import wait_for

OLD_FINALIZER = "training.dtjob.io/finalizer"


def gone(read: Any) -> bool | None:
    try:
        read()
    except client.ApiException as err:
        if err.status == 404:
            return True
        raise
    return None


def test_a_job_deleted_while_no_operator_runs_goes_at_once_and_takes_its_pods(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    with running_operator(cluster_b, namespace):
        jobs.create(pytorch_job("orphan"))
        jobs.wait_pods("orphan", 2, phase="Running")
        assert not jobs.get("orphan")["metadata"].get("finalizers")
    # The operator is stopped: nothing but the API server and its garbage collector acts now.
    jobs.delete("orphan")
    wait_for(lambda: gone(lambda: jobs.get("orphan")), "the job deleted without an operator", timeout=10)
    wait_for(lambda: jobs.pods("orphan") == [] or None, "its pods collected through their owner", timeout=60)
    services = core.list_namespaced_service(
        namespace, label_selector="training.dtjob.io/job-name=orphan"
    ).items
    wait_for(
        lambda: (
            not core.list_namespaced_service(
                namespace, label_selector="training.dtjob.io/job-name=orphan"
            ).items
            or None
        ),
        f"its Service collected ({len(services)} at first)",
        timeout=60,
    )


def test_the_operator_removes_the_finalizer_an_older_version_left_and_a_namespace_then_deletes(
    cluster_b: Cluster, crd: dict[str, Any], objects: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    namespace = f"t-uninstall-{uuid.uuid4().hex[:6]}"  # this test deletes it: not the shared fixture's
    create_namespace(core, namespace)
    jobs = Jobs(objects, core, namespace)
    old = pytorch_job("legacy", runPolicy={"suspend": True})
    old["metadata"]["finalizers"] = [OLD_FINALIZER]
    jobs.create(old)
    with running_operator(cluster_b, namespace):
        wait_for(
            lambda: not jobs.get("legacy")["metadata"].get("finalizers") or None,
            "the old finalizer removed",
            timeout=30,
        )
    core.delete_namespace(namespace)
    wait_for(lambda: gone(lambda: core.read_namespace(namespace)), "the namespace deleted", timeout=90)
    assert gone(lambda: objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "legacy"))
