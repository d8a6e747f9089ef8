"""A deterministic failure stops early (tier C, real pods, the real trainer image): two attempts that
fail the same way at the same step end the job with RepeatedFailure, while failures that differ each time
still get the whole backoffLimit (docs/fault-tolerance.md#repeated-failures)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from hack import images
from localcluster import Cluster
from tests.support.ddp_digits import crashing_job
from tests.support.ddp_progress import example
from tests.support.jobs import Jobs
from tests.support.operator import operator_taking_reports, running_operator
from tests.support.reads import wait_event

BUG = "ValueError: rank 1 fails after step 30 (--fail-at-step)"
# A different error every time, as a flaky dependency gives.
FLAKY = "import os; raise RuntimeError('lost the data server ' + os.urandom(4).hex())"


def test_a_trainer_failing_the_same_way_at_the_same_step_twice_fails_after_two_attempts(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # Each attempt resumes from the checkpoint at step 20 and fails after step 30: a bug, not bad luck.
    args = ["--epochs", "20", "--checkpoint-every", "20", "--fail-at-step", "30", "--fail-rank", "1"]
    job = example("bug", args, backoffLimit=3, failureSettleSeconds=5)
    images.ensure(cluster_c, images.TORCH_TRAINER)
    with operator_taking_reports(cluster_c, namespace, monkeypatch):
        jobs.create(job)
        failed = jobs.wait_condition("bug", "Failed", timeout=420)
        wait_event(core, namespace, "bug", "PodFailed", type_="Warning")
    status = jobs.get("bug")["status"]
    assert failed["reason"] == "RepeatedFailure", failed
    assert status["attempt"] == 2 and status["restarts"]["failures"] == 1, status
    assert failed["message"].startswith("attempts 1 and 2 failed the same way at step "), failed["message"]
    assert f"{BUG} at torch_digits.py:" in failed["message"], failed["message"]
    # The first attempt's failure, as the status kept it to compare the second with.
    first = status["lastRestart"]
    assert first["reason"] == "PodFailed" and 20 <= first["step"] <= 30, first
    assert any(f["error"] == BUG and f["exitCode"] == 1 for f in first["failures"]), first
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=bug").items
    assert [e.reason for e in events if e.type == "Warning"].count("PodFailed") == 1


@pytest.mark.any_cluster
def test_a_trainer_failing_differently_each_time_gets_its_whole_backoff_limit(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, namespace: str
) -> None:
    job = crashing_job("flaky", images.deliver(cluster_c, images.TORCH_TRAINER))
    job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]["command"] = ["python", "-c", FLAKY]
    job["spec"]["runPolicy"]["backoffLimit"] = 2
    with running_operator(cluster_c, namespace):
        jobs.create(job)
        failed = jobs.wait_condition("flaky", "Failed", timeout=300)
    status = jobs.get("flaky")["status"]
    assert failed["reason"] == "BackoffLimitExceeded", failed
    assert (status["attempt"], status["restarts"]["failures"]) == (3, 2), status
    assert "RuntimeError: lost the data server " in failed["message"]
