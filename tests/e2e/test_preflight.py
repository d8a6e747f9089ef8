"""The NCCL preflight between real pods (tier C, gloo on CPU) with an impossible floor: the job fails at
once with PreflightFailed, naming the transport and the figure, counted in restarts.preflightFailures and
charged to no restart budget. (The passing preflight runs as the ddp-preflight example in
test_examples.py.)"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from hack import images
from hack.current import localize
from localcluster import Cluster
from tests.support.jobs import Jobs
from tests.support.operator import running_operator
from tests.support.paths import REPO

EXAMPLE = REPO / "examples" / "ddp-preflight.yaml"


def preflight_job(name: str, image: str, **preflight: Any) -> dict[str, Any]:
    job: dict[str, Any] = localize(yaml.safe_load(EXAMPLE.read_text()), {images.TORCH_TRAINER.ref: image})
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = f"/var/lib/dtjob-examples/{name}"
    job["spec"]["nccl"]["preflight"].update(preflight)
    return job


@pytest.mark.any_cluster
def test_a_preflight_below_its_floor_fails_the_job_fast_with_the_figures(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, namespace: str
) -> None:
    image = images.deliver(cluster_c, images.TORCH_TRAINER)
    with running_operator(cluster_c, namespace):
        jobs.create(preflight_job("too-slow", image, minBusBandwidthGBps=100000))
        failed = jobs.wait_condition("too-slow", "Failed", timeout=300)
    assert failed["reason"] == "PreflightFailed", failed
    assert "transport gloo" in failed["message"] and "below the floor of 100000 GB/s" in failed["message"]
    status = jobs.get("too-slow")["status"]
    assert status["restarts"] == {"failures": 0, "preemptions": 0, "total": 0, "preflightFailures": 1}
    measured = status["preflight"]
    assert measured["passed"] is False and measured["busBandwidthGbps"] > 0
    assert (measured["backend"], measured["transport"], measured["worldSize"]) == ("gloo", "gloo", 2)
