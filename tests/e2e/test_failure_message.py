"""A crashed trainer explains itself (tier C, real containers): its last log lines become its termination
message (FallbackToLogsOnError), and the operator quotes them in the restart Event, in
status.lastRestart.message and in the final Failed condition, after the pods are gone."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from hack import images
from localcluster import Cluster
from tests.support.ddp_digits import crashing_job
from tests.support.jobs import Jobs
from tests.support.operator import running_operator
from tests.support.reads import wait_event

ERROR_LINE = "PermissionError: [Errno 13] Permission denied: '/etc/passwd'"


@pytest.mark.any_cluster
def test_a_crashed_trainers_error_line_reaches_the_restart_event_the_status_and_the_failure(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    image = images.deliver(cluster_c, images.TORCH_TRAINER)
    with running_operator(cluster_c, namespace):
        jobs.create(crashing_job("crash", image))
        failed = jobs.wait_condition("crash", "Failed", timeout=300)
        restart = wait_event(core, namespace, "crash", "PodFailed")
    status = jobs.get("crash")["status"]
    assert status["restarts"] == {"failures": 1, "preemptions": 0, "total": 1}
    assert status["lastRestart"]["message"].endswith(ERROR_LINE), status["lastRestart"]
    assert failed["reason"] == "BackoffLimitExceeded" and failed["message"].endswith(ERROR_LINE), failed
    assert restart.type == "Warning" and restart.message.endswith(ERROR_LINE), restart.message
