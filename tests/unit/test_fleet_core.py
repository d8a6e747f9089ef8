"""The pure parts of the read/write path: the cache's view of a pod, the rate limit, the settings, which
copy of a job a pass decides on, the pods it created that the watch lacks yet, and the back-off."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from dtjob.api import NcclProfileName
from dtjob.core.observed import classify, node_essentials, node_view, pod_essentials
from dtjob.core.plan import Plan
from dtjob.kube.throttle import TokenBucket
from dtjob.runtime.created import CREATED_MEMORY, Created, children_seen, remember_created
from dtjob.runtime.loop import RESYNC_SECONDS, backoff, freshest, namesakes, next_pass_in
from dtjob.settings import OperatorSettings, from_env, kopf_run_namespaces
from tests.support.builders import (
    NOW,
    UID,
    deleted_at,
    exited,
    manifest,
    node,
    pending,
    pods_of,
    preempted,
    running,
)

POD = pods_of(manifest(("Worker", 2)))["mnist-worker-1"]


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(POD, id="a pod just created"),
        pytest.param(pending(POD, unschedulable=True), id="an unschedulable pod"),
        pytest.param(running(POD), id="a running pod"),
        pytest.param(exited(POD, 137, message="OOM"), id="a pod that failed"),
        pytest.param(preempted(POD), id="a preempted pod"),
        pytest.param(deleted_at(running(POD), "2030-01-01T12:00:30Z"), id="a pod being deleted"),
    ],
)
def test_the_cache_keeps_all_of_a_pod_that_its_classification_reads(pod: dict[str, Any]) -> None:
    later = NOW + timedelta(minutes=5)
    assert classify(pod_essentials(pod), later, {}) == classify(pod, later, {})
    assert "env" not in str(pod_essentials(pod)["spec"])  # the bulk of a pod is not kept


def test_the_cache_keeps_all_of_a_node_that_its_view_reads() -> None:
    for ready in ("True", "Unknown"):
        full = node(ready=ready)
        assert node_view(node_essentials(full)) == node_view(full)


def test_the_token_bucket_lets_a_burst_through_then_spaces_calls_at_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    now[0] = 10.0  # idle long enough: a full burst again, never more
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() > 0


def test_trying_the_bucket_takes_a_token_only_when_one_is_at_hand() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=2, clock=lambda: now[0])
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]
    now[0] = 0.05  # half a token: still none, and nothing owed
    assert bucket.try_take() is False
    now[0] = 0.1
    assert bucket.try_take() is True


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, OperatorSettings(), id="defaults when nothing is set"),
        pytest.param(
            {"DTJOB_MAX_CONCURRENT_PASSES": "4", "DTJOB_API_QPS": "50", "DTJOB_API_BURST": "100", "DTJOB_METRICS_PORT": "8080",
             "DTJOB_TCPX_DAEMON_IMAGE": "r/tcpx:1", "DTJOB_TCPXO_DAEMON_IMAGE": "r/tcpxo:2", "DTJOB_KUEUE": "false",
             "DTJOB_MANAGE_CRD": "false", "DTJOB_PROGRESS_PORT": "8082", "DTJOB_PROGRESS_URL": "http://p:8082/v1/progress",
             "DTJOB_PROGRESS_STATUS_SECONDS": "5"},
            OperatorSettings(max_concurrent_passes=4, api_qps=50.0, api_burst=100, metrics_port=8080, kueue=False,
                             manage_crd=False, progress_port=8082, progress_url="http://p:8082/v1/progress",
                             progress_status_seconds=5.0,
                             daemon_images={NcclProfileName.GPUDIRECT_TCPX: "r/tcpx:1", NcclProfileName.GPUDIRECT_TCPXO: "r/tcpxo:2"}),
            id="every setting from its variable",
        ),
    ],
)  # fmt: skip
def test_settings_come_from_the_environment(env: dict[str, str], expected: OperatorSettings) -> None:
    assert from_env(env) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"DTJOB_API_QPS": "fast"}, "DTJOB_API_QPS='fast' is not a float", id="a word for a number"
        ),
        pytest.param({"DTJOB_MAX_CONCURRENT_PASSES": "0"}, "must be at least 1", id="zero concurrent passes"),
        pytest.param({"DTJOB_API_BURST": "2.5"}, "is not a int", id="a fraction for a count"),
        pytest.param(
            {"DTJOB_KUEUE": "yes"}, "DTJOB_KUEUE='yes' is not true or false", id="a word for a switch"
        ),
        pytest.param(
            {"DTJOB_PROGRESS_URL": "http://p/v1/progress"},
            "DTJOB_PROGRESS_PORT is not",
            id="a URL with no intake",
        ),
    ],
)
def test_a_malformed_setting_is_an_error_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        from_env(env)


def test_kopf_run_namespaces_are_names_and_a_pattern_is_refused_by_name() -> None:
    assert kopf_run_namespaces(["team-a", "team-b"]) == ("team-a", "team-b")
    assert kopf_run_namespaces([]) == ()
    for pattern in ("team-*", "!kube-system", "team-?", "team-[ab]"):
        with pytest.raises(ValueError, match=re.escape(f"--namespace {pattern}: ")):
            kopf_run_namespaces(["team-a", pattern])


def _job(uid: str, version: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "resourceVersion": version}}


@pytest.mark.parametrize(
    ("watched", "written", "expected"),
    [
        pytest.param(_job("a", "10"), None, _job("a", "10"), id="nothing written: the watch's copy"),
        pytest.param(_job("a", "10"), _job("a", "12"), _job("a", "12"), id="the watch lags our write: ours"),
        pytest.param(
            _job("a", "15"), _job("a", "12"), _job("a", "15"), id="the watch caught up and moved on"
        ),
        pytest.param(
            _job("b", "10"), _job("a", "12"), _job("b", "10"), id="a namesake job: the watch's copy"
        ),
        pytest.param(_job("a", "10"), _job("a", "x9"), _job("a", "10"), id="a version that is no number"),
    ],
)
def test_a_pass_decides_on_the_newest_copy_of_the_job(
    watched: dict[str, Any], written: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    assert freshest(watched, written) == expected


def test_the_back_off_doubles_with_jitter_up_to_its_ceiling() -> None:
    for failures, ceiling in [(1, 0.5), (2, 1.0), (5, 8.0), (40, 300.0)]:
        waits = {backoff(failures) for _ in range(50)}
        assert all(ceiling / 2 <= w <= ceiling for w in waits) and len(waits) > 1


def names(children: list[dict[str, Any]]) -> list[str]:
    return sorted(child["metadata"]["name"] for child in children)


def test_created_pods_count_until_the_watch_delivers_them_then_overdue_ones_go_to_the_api_server() -> None:
    pods = pods_of(manifest(("Worker", 3)))
    first, second, third = (pod_essentials(pods[f"mnist-worker-{i}"]) for i in range(3))
    created: Created = {}
    remember_created(created, [first, second, third], watched=[third], now=NOW)
    assert set(created) == {first["metadata"]["uid"], second["metadata"]["uid"]}  # the watch had the third

    children, overdue = children_seen(UID, [], [third], created, NOW)
    assert names(children) == [f"mnist-worker-{i}" for i in range(3)] and overdue == []
    children, overdue = children_seen(UID, [], [first, third], created, NOW)
    assert names(children) == names([first, second, third]) and overdue == []
    assert set(created) == {second["metadata"]["uid"]}  # delivered by the watch: forgotten
    children, overdue = children_seen(UID, [], [third], created, NOW + CREATED_MEMORY * 2)
    assert names(children) == ["mnist-worker-2"] and overdue == [second]
    assert created == {}  # not delivered in CREATED_MEMORY: the pass asks the API server about it


@pytest.mark.parametrize("phase", ["Running", "Succeeded"])
def test_a_pass_that_awaits_created_pods_comes_back_once_they_would_be_forgotten(phase: str) -> None:
    """A created pod the watch never delivers (gone again before the POST returned) must not stand in the
    job's view until the resync: the pass after CREATED_MEMORY sees it is gone."""
    job = {"status": {"phase": phase}}
    soon = CREATED_MEMORY.total_seconds() + 1
    assert next_pass_in(Plan(), job, awaiting_watch=True) == soon
    assert next_pass_in(Plan(requeue_after=2.0), job, awaiting_watch=True) == 2.0
    assert next_pass_in(Plan(requeue_after=600.0), job, awaiting_watch=True) == soon
    assert next_pass_in(Plan(), job) == (None if phase == "Succeeded" else RESYNC_SECONDS)


def test_children_are_only_those_the_job_owns() -> None:
    pod = pod_essentials(POD)
    namesake = {**pod, "metadata": {**pod["metadata"], "ownerReferences": [{"uid": "an-older-job"}]}}
    assert children_seen(UID, [], [pod, namesake], {}, NOW) == ([pod], [])


def test_pods_an_earlier_job_of_the_same_name_owns_are_namesakes_that_hold_the_new_gangs_names() -> None:
    def pod(name: str, owner_uid: str, kind: str = "DistributedTrainingJob") -> dict[str, Any]:
        return {"metadata": {"name": name, "ownerReferences": [{"kind": kind, "uid": owner_uid}]}}

    ours, earlier = pod("again-worker-0", "new"), pod("again-worker-1", "old")
    assert namesakes([ours, earlier, pod("again-worker-0", "old")], "new") == "again-worker-0, again-worker-1"
    assert namesakes([ours, pod("x", "rs", kind="ReplicaSet")], "new") == ""  # not a job's: left alone
