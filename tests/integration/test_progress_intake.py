"""The progress intake against the real apiserver (tier B): tokens made by its TokenRequest API and bound
to real pods (kwok runs them on fake GPU nodes), checked by its TokenReview; reports posted as a trainer
posts them (docs/progress.md). The trainers' side, with real training, is tests/e2e/test_progress.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from dtjob.kube.leader import IDENTITY_ENV, LEASE_ENV, NAMESPACE_ENV
from localcluster import Cluster
from tests.support.http import post
from tests.support.jobs import Jobs, pytorch_job
from tests.support.operator import operator_taking_reports
from tests.support.reads import wait_event
from tests.support.service_accounts import token
from tests.support.waiting import wait_for


def progress(jobs: Jobs, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = (jobs.get(name).get("status") or {}).get("progress")
    return found


def restarts(jobs: Jobs, name: str) -> int:
    return int(jobs.get(name)["status"]["restarts"]["total"])


def reviews(cluster: Cluster) -> float:
    """TokenReviews the apiserver has answered so far (its own request counter)."""
    text = cluster.kubectl("get", "--raw", "/metrics")
    pattern = r'^apiserver_request_total\{[^}]*resource="tokenreviews"[^}]*\} (\S+)$'
    return sum(float(value) for value in re.findall(pattern, text, flags=re.MULTILINE))


# Counts the apiserver's TokenReviews, which every other progress intake adds to.
@pytest.mark.cluster_wide
def test_each_pod_reports_for_its_own_job_only_and_bad_reports_are_refused_by_name(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    interval = {"DTJOB_PROGRESS_STATUS_SECONDS": "3"}  # reports alone wake a pass at most every 3 s
    with operator_taking_reports(cluster_b, namespace, monkeypatch, **interval) as (_, url):
        jobs.create(pytorch_job("first", workers=2))
        jobs.create(pytorch_job("second", workers=1))  # a second job in the same namespace
        jobs.wait_pods("first", 2, phase="Running")
        jobs.wait_pods("second", 1, phase="Running")
        first0 = token(core, namespace, "first-worker-0")

        before = reviews(cluster_b)
        assert post(url, {"step": 1, "totalSteps": 50, "loss": 1.5}, first0) == (204, "")
        wait_for(lambda: (p := progress(jobs, "first")) and p["step"] == 1, "first's first report")
        # Inside the interval these wake no pass of their own: the last still reaches the status at its end.
        for step in range(2, 6):
            assert post(url, {"step": step, "totalSteps": 50, "loss": 1.5}, first0) == (204, "")
        assert reviews(cluster_b) - before == 1  # one review for the token, not one a report
        wait_for(lambda: (p := progress(jobs, "first")) and p["step"] == 5, "first's last report")
        assert progress(jobs, "first")["percent"] == 10.0  # type: ignore[index]
        assert progress(jobs, "second") is None

        assert post(url, {"step": 3}, token(core, namespace, "second-worker-0"))[0] == 204
        wait_for(lambda: (p := progress(jobs, "second")) and p["step"] == 3, "second's progress")
        assert progress(jobs, "first")["step"] == 5  # type: ignore[index]

        # Bad input: the answer names what is wrong, and nothing is recorded.
        code, text = post(url, {"step": -1}, first0)
        assert code == 400 and "step" in text, text
        code, text = post(url, {"step": 6, "stepz": 7}, first0)
        assert code == 400 and "stepz" in text, text
        assert post(url, b"{not json", first0)[0] == 400
        assert post(url, {"step": 6}, None)[0] == 401
        assert post(url, {"step": 6}, "made-up")[0] == 401
        api_token = token(core, namespace, "first-worker-1", audience=None)  # the API's audience, not ours
        assert post(url, {"step": 6}, api_token)[0] == 401
        bare = client.V1Pod(
            metadata=client.V1ObjectMeta(name="not-a-trainer"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="localhost/none:1")]),
        )
        core.create_namespaced_pod(namespace, bare)
        code, text = post(url, {"step": 6}, token(core, namespace, "not-a-trainer"))
        assert code == 404 and "not a pod of a job" in text, text
        assert progress(jobs, "first")["step"] == 5  # type: ignore[index]


def test_a_gang_that_stops_stepping_is_restarted_naming_the_pod_that_fell_behind(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    deadline = 30
    with operator_taking_reports(cluster_b, namespace, monkeypatch) as (_, url):
        job = pytorch_job("stuck", workers=2, runPolicy={"progressDeadlineSeconds": deadline})
        jobs.create(job)
        jobs.create(pytorch_job("steady", workers=1))  # no deadline: never judged
        jobs.wait_pods("stuck", 2, phase="Running")
        jobs.wait_pods("steady", 1, phase="Running")
        worker0, worker1 = (token(core, namespace, f"stuck-worker-{i}") for i in (0, 1))
        steady = token(core, namespace, "steady-worker-0")
        for bearer in (worker0, worker1, steady):
            assert post(url, {"step": 1}, bearer)[0] == 204
        # A long save holds the clock: worker 0 saves for longer than the deadline, then both step once
        # more; worker 1 then goes quiet, and worker 0 after one more step (blocked on it).
        assert post(url, {"step": 1, "phase": "checkpointing"}, worker0)[0] == 204
        saved_at = datetime.now(UTC) + timedelta(seconds=deadline + 3)
        wait_for(lambda: datetime.now(UTC) > saved_at, "a save longer than the deadline", deadline + 10, 1,
                 hopeless=lambda: "the save was taken for a hang" if restarts(jobs, "stuck") else None)  # fmt: skip
        assert post(url, {"step": 2}, worker0)[0] == 204
        assert post(url, {"step": 2, "message": "waiting on the data loader"}, worker1)[0] == 204
        assert post(url, {"step": 3}, worker0)[0] == 204
        last_step_at = datetime.now(UTC)
        last = wait_for(lambda: jobs.get("stuck")["status"].get("lastRestart"), "the restart", deadline + 30)
        waited = (datetime.now(UTC) - last_step_at).total_seconds()
        status = jobs.get("stuck")["status"]
        assert status["restarts"] == {"failures": 0, "preemptions": 0, "hangs": 1, "total": 1}, status
        assert last["reason"] == "ProgressDeadlineExceeded"
        assert "last step 3" in last["message"], last
        assert (
            "pod stuck-worker-1 fell behind first, at step 2 (waiting on the data loader)" in last["message"]
        )
        assert deadline - 2 <= waited <= deadline + 15, waited
        assert restarts(jobs, "steady") == 0
        wait_event(core, namespace, "stuck", "ProgressDeadlineExceeded")
        jobs.wait_pods("stuck", 2, phase="Running")  # attempt 2, resumed at once: no back-off


def test_a_standby_takes_no_reports(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with operator_taking_reports(cluster_b, namespace, monkeypatch) as (_, url):
        jobs.create(pytorch_job("led", workers=1))
        jobs.wait_pods("led", 1, phase="Running")
    # Another replica holds the Lease: this one is a standby, whose intake sends trainers elsewhere.
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="dtjob-intake-test"),
        spec=client.V1LeaseSpec(holder_identity="the-leader", lease_duration_seconds=600,
                                 renew_time=datetime.now(UTC), acquire_time=datetime.now(UTC)),
    )  # fmt: skip
    client.CoordinationV1Api(core.api_client).create_namespaced_lease(namespace, lease)
    election = {LEASE_ENV: "dtjob-intake-test", NAMESPACE_ENV: namespace, IDENTITY_ENV: "the-standby"}
    with operator_taking_reports(cluster_b, namespace, monkeypatch, **election) as (_, url):
        bearer = token(core, namespace, "led-worker-0")
        code, text = wait_for(lambda: post(url, {"step": 4}, bearer), "the intake to answer")
        assert code == 503 and "standby" in text, text
    assert progress(jobs, "led") is None
