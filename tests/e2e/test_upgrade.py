"""An upgrade as Helm users do it (tier C: the operators run as pods on the real node, installed by
Helm; the jobs' pods run on kwok's fake GPU nodes, where the test plays the kubelet).

The previous release (0.1.0: its source in tests/data/releases, its image built from it) is installed
with its own chart and CRD and runs jobs: one training, one mid-restart (its ended attempt's pod held
Terminating). Then plain `helm upgrade` to this tree's chart and image: no pod touched, counters exact,
the CRD upgraded by the new operator so that a field of this release is accepted and a status field it
writes is kept (not pruned). Then `helm rollback`: again no pod touched and counters exact."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dtjob.api import CRD_NAME
from dtjob.crd import REVISION_ANNOTATION, SCHEMA_REVISION
from dtjob.runtime.legacy import LEGACY_FINALIZER
from hack import images, releases
from localcluster import Cluster, sim
from tests.support.chart import CHART
from tests.support.helm_release import RELEASE, helm, helm_answer, operator_pod
from tests.support.jobs import GROUP, JOB_LABEL, PLURAL, VERSION, Jobs, pytorch_job
from tests.support.paths import CRD_FILE
from tests.support.waiting import wait_for

# Replaces the CRD with the previous release's.
pytestmark = pytest.mark.cluster_wide

PREVIOUS = releases.PREVIOUS
SETTLE_SECONDS = 600  # longer than the test: a member that fails stays "settling", brokenSince set


@pytest.fixture
def previous(cluster_c: Cluster) -> releases.Release:
    release = releases.in_cache(PREVIOUS, cluster_c.layout)
    images.ensure(cluster_c, release.operator)
    return release


@pytest.fixture
def installed_previous(
    cluster_c: Cluster, crd: dict[str, Any], previous: releases.Release, namespace: str,
    objects: client.CustomObjectsApi,
) -> Iterator[releases.Release]:  # fmt: skip
    """The previous release as it was installed: its CRD (put back as a PUT: no field of this one
    survives), its chart and image; at the end uninstalled, and its finalizer taken off the jobs."""
    cluster_c.kubectl("replace", "-f", str(previous.crd))
    repository, tag = previous.operator.ref.rsplit(":", 1)
    helm(cluster_c, "install", RELEASE, str(previous.chart), "-n", namespace,
         "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
         "--set", f"watchNamespaces={{{namespace}}}", "--wait", "--timeout", "3m")  # fmt: skip
    try:
        yield previous
    finally:
        helm(cluster_c, "uninstall", RELEASE, "-n", namespace, "--wait")
        for job in objects.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
            objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job["metadata"]["name"],
                                                   {"metadata": {"finalizers": None}})  # fmt: skip
        cluster_c.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))


def uids(jobs: Jobs, name: str) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in jobs.pods(name)}


def every_pod(core: client.CoreV1Api, namespace: str, name: str) -> list[client.V1Pod]:
    """The job's pods, those being deleted too."""
    return list(core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}").items)


def counters(jobs: Jobs, name: str) -> tuple[int, dict[str, int]]:
    status = jobs.get(name)["status"]
    return status["attempt"], {
        k: v for k, v in status["restarts"].items() if k in ("failures", "preemptions", "total")
    }


def test_helm_upgrade_from_the_previous_release_and_rollback_touch_no_pod_and_keep_every_field(
    cluster_c: Cluster, installed_previous: releases.Release, jobs: Jobs, core: client.CoreV1Api,
    namespace: str, api_client: client.ApiClient,
) -> None:  # fmt: skip
    extensions = client.ApiextensionsV1Api(api_client)
    old_operator = operator_pod(core, namespace)
    assert old_operator.spec.containers[0].image.endswith(f":{PREVIOUS}")

    # Under the previous release: one job training, one mid-restart.
    jobs.create(pytorch_job("steady"))
    jobs.create(pytorch_job("restarting"))
    jobs.wait_pods("steady", 2, phase="Running")
    jobs.wait_pods("restarting", 2, phase="Running")
    jobs.wait_condition("steady", "Running")
    sim.stick_terminating(core, namespace, "restarting-worker-1")
    held = jobs.pods("restarting")[1]
    sim.exit_pod(core, namespace, "restarting-worker-0", exit_code=1)
    wait_for(lambda: counters(jobs, "restarting") == (2, {"failures": 1, "preemptions": 0, "total": 1}),
             "the previous release's gang restart")  # fmt: skip
    steady = uids(jobs, "steady")
    # The previous release writes the new attempt to the status, then deletes the ended attempt's pods.
    wait_for(lambda: core.read_namespaced_pod("restarting-worker-1", namespace).metadata.deletion_timestamp,
             "the ended attempt's pod deleted (and held)")  # fmt: skip

    # `helm upgrade` to this tree's chart and image. Reusing the old release's values alone lacks the
    # keys this release added (Helm does not fill them from the new chart's defaults): the chart says so.
    repository, tag = images.ensure(cluster_c, images.OPERATOR).rsplit(":", 1)
    upgrade = ["upgrade", RELEASE, str(CHART), "-n", namespace, "--set", f"image.repository={repository}",
               "--set", f"image.tag={tag}", "--wait", "--timeout", "3m"]  # fmt: skip
    refused = helm_answer(cluster_c, *upgrade, "--reuse-values")
    assert refused.returncode == 1 and "--reset-then-reuse-values" in refused.stderr, refused.stderr
    assert operator_pod(core, namespace).metadata.uid == old_operator.metadata.uid  # nothing changed
    helm(cluster_c, *upgrade, "--reset-then-reuse-values")
    new_operator = operator_pod(core, namespace)
    assert new_operator.spec.containers[0].image == images.OPERATOR.ref
    revision = wait_for(
        lambda: extensions.read_custom_resource_definition(CRD_NAME).metadata.annotations.get(
            REVISION_ANNOTATION
        ),
        "the new operator to upgrade the CRD",
    )
    assert revision == str(SCHEMA_REVISION)

    # No pod touched, counters exact; the held pod of the ended attempt is still waited for.
    passed_over(jobs, ("steady", "restarting"), finalizer=False)
    assert uids(jobs, "steady") == steady and jobs.get("steady")["status"]["phase"] == "Running"
    assert counters(jobs, "restarting") == (2, {"failures": 1, "preemptions": 0, "total": 1})
    assert [p.metadata.uid for p in every_pod(core, namespace, "restarting")] == [held.metadata.uid]
    # Released, the old attempt's pod goes and attempt 2 starts: one restart, counted once.
    sim.finalise_pod(core, namespace, "restarting-worker-1", held.metadata.uid)
    jobs.wait_pods("restarting", 2, phase="Running")
    jobs.wait_condition("restarting", "Running")
    assert counters(jobs, "restarting") == (2, {"failures": 1, "preemptions": 0, "total": 1})
    restarted = uids(jobs, "restarting")

    # A field of this release is accepted, and a status field it writes is kept.
    jobs.create(pytorch_job("settling", runPolicy={"failureSettleSeconds": SETTLE_SECONDS}))
    jobs.wait_pods("settling", 2, phase="Running")
    jobs.wait_condition("settling", "Running")
    sim.exit_pod(core, namespace, "settling-worker-1", exit_code=1)
    broken = wait_for(lambda: jobs.get("settling")["status"].get("brokenSince"), "status.brokenSince")
    assert jobs.get("settling")["spec"]["runPolicy"]["failureSettleSeconds"] == SETTLE_SECONDS

    # `helm rollback`: the previous operator again, and still no pod touched, no counter moved.
    helm(cluster_c, "rollback", RELEASE, "1", "-n", namespace, "--wait", "--timeout", "3m")
    rolled_back = operator_pod(core, namespace)
    assert rolled_back.spec.containers[0].image.endswith(f":{PREVIOUS}")
    passed_over(jobs, ("steady", "restarting"), finalizer=True)
    assert uids(jobs, "steady") == steady and jobs.get("steady")["status"]["phase"] == "Running"
    assert uids(jobs, "restarting") == restarted
    assert counters(jobs, "restarting") == (2, {"failures": 1, "preemptions": 0, "total": 1})
    assert jobs.get("settling")["status"].get("brokenSince") == broken  # the older one leaves it be
    # A job that uses a field the previous release does not know is one it cannot honour: it says so
    # (Invalid, naming the field) rather than run it without the field; its pods are left alone.
    invalid = jobs.wait_condition("settling", "Invalid")
    assert "failureSettleSeconds" in invalid["message"], invalid
    assert len(jobs.pods("settling")) == 2


def passed_over(jobs: Jobs, names: tuple[str, ...], finalizer: bool) -> None:
    """Wait until the operator now running has taken a pass over each job: the previous release puts its
    finalizer on every job it runs, this one takes it off."""

    def holds(name: str) -> bool:
        return LEGACY_FINALIZER in (jobs.get(name)["metadata"].get("finalizers") or [])

    for name in names:
        what = f"a pass over {name} ({'its finalizer put on' if finalizer else 'its finalizer taken off'})"
        wait_for(lambda job=name: holds(job) == finalizer, what, timeout=60)
