"""A crashed trainer explains itself (tier C, real containers): its last log lines become its termination
message (FallbackToLogsOnError), and the operator quotes them in the restart Event, in
status.lastRestart.message and in the final Failed condition, after the pods are gone."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client

from hack import images
from localcluster import Cluster
from tests.integration.conftest import REPO, Jobs, running_operator

EXAMPLE = REPO / "examples" / "ddp-digits.yaml"
# What the issue saw: a trainer that cannot write its model. The image runs as uid 1000. Everything on
# stderr, as a crash's log is: the kubelet interleaves stdout and stderr in no guaranteed order.
CRASH = "import sys; sys.stderr.write('epoch 1: loss 0.52\\n'); open('/etc/passwd', 'a')"
ERROR_LINE = "PermissionError: [Errno 13] Permission denied: '/etc/passwd'"


def crashing_job(name: str, image: str) -> dict[str, Any]:
    """The DDP example crashing at once, in `image` (the torch trainer's, where the cluster finds it)."""
    job: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = f"/var/lib/dtjob-examples/{name}"
    trainer = job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    trainer["image"], trainer["command"], trainer["args"] = image, ["python", "-c", CRASH], []
    job["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 1}
    return job


@pytest.mark.any_cluster
def test_a_crashed_trainers_error_line_reaches_the_restart_event_the_status_and_the_failure(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    image = images.deliver(cluster_c, images.TORCH_TRAINER)
    with running_operator(cluster_c, namespace):
        jobs.create(crashing_job("crash", image))
        failed = jobs.wait_condition("crash", "Failed", timeout=300)
    status = jobs.get("crash")["status"]
    assert status["restarts"] == {"failures": 1, "preemptions": 0, "total": 1}
    assert status["lastRestart"]["message"].endswith(ERROR_LINE), status["lastRestart"]
    assert failed["reason"] == "BackoffLimitExceeded" and failed["message"].endswith(ERROR_LINE), failed
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=crash").items
    restart = next(e for e in events if e.reason == "PodFailed")
    assert restart.type == "Warning" and restart.message.endswith(ERROR_LINE), restart.message
