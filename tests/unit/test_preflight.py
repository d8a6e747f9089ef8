"""The NCCL preflight as the operator renders and reads it: the init container, its floor and expected
transport by profile, its figures in status.preflight, and a failed preflight failing the job fast."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dtjob.core.plan import Event
from dtjob.core.preflight import PREFLIGHT_CONTAINER, result_of
from tests.support.builders import (
    GKE_NETWORKS,
    NOW,
    SHARED_CHECKPOINTS,
    manifest,
    pods_of,
    preflight_ended,
    preflight_outcome,
)
from tests.support.plan import plan_for

ACCELERATED = {"accelerator": {"type": "nvidia-h100-80gb", "count": 8}, "nccl": {"profile": "GPUDirectTCPX"}}


def job(preflight: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    nccl = {"preflight": {"enabled": True, **(preflight or {})}, **spec.pop("nccl", {})}
    return manifest(("Master", 1), ("Worker", 1), checkpoint=SHARED_CHECKPOINTS, nccl=nccl, **spec)


def init_containers(manifest_: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pods_of(manifest_)["mnist-worker-0"]["spec"].get("initContainers", []))


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_the_preflight_runs_last_among_init_containers_with_the_trainers_image_env_and_gpus() -> None:
    pod = pods_of(job(**ACCELERATED))["mnist-worker-0"]
    names = [c["name"] for c in pod["spec"]["initContainers"]]
    assert names[-1] == PREFLIGHT_CONTAINER and len(names) > 1  # after the TCPX daemon sidecar
    preflight, trainer = pod["spec"]["initContainers"][-1], pod["spec"]["containers"][0]
    assert preflight["image"] == trainer["image"] and preflight["resources"] == trainer["resources"]
    assert preflight["command"] == ["python", "-m", "dtjob_trainer.preflight"]
    assert preflight["volumeMounts"] == trainer["volumeMounts"]
    assert {k: v for k, v in env(preflight).items() if not k.startswith("DTJ_PREFLIGHT_")} == env(trainer)
    assert env(preflight)["MASTER_ADDR"] == env(trainer)["MASTER_ADDR"]
    assert preflight["terminationMessagePolicy"] == "FallbackToLogsOnError"


@pytest.mark.parametrize(
    ("spec", "floor", "transport"),
    [
        pytest.param(ACCELERATED, "10", "GPUDirectTCPX", id="A3 High: the TCPX profile's floor and plugin"),
        pytest.param({"accelerator": {"type": "nvidia-h200-141gb", "count": 8}, "nccl": {"profile": "RDMA"}}, "30", "gIB",
                     id="A3 Ultra: RDMA"),
        pytest.param({**ACCELERATED, "nccl": {"profile": "TCP"}}, None, None,
                     id="TCP: figures only"),
        pytest.param({}, None, None, id="no accelerator (gloo): figures only"),
    ],
)  # fmt: skip
def test_the_floor_and_expected_transport_come_from_the_network_profile(
    spec: dict[str, Any], floor: str | None, transport: str | None
) -> None:
    preflight = init_containers(job(**spec))[-1]
    assert env(preflight).get("DTJ_PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS") == floor
    assert env(preflight).get("DTJ_PREFLIGHT_EXPECTED_TRANSPORT") == transport
    assert env(preflight)["DTJ_PREFLIGHT_BUDGET_SECONDS"] == "30"


def test_a_floor_in_the_spec_wins_and_no_preflight_is_rendered_unless_enabled() -> None:
    preflight = init_containers(job({"minBusBandwidthGBps": 55.5, "budgetSeconds": 12}, **ACCELERATED))[-1]
    assert env(preflight)["DTJ_PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS"] == "55.5"
    assert env(preflight)["DTJ_PREFLIGHT_BUDGET_SECONDS"] == "12"
    plain = manifest(("Worker", 2), **ACCELERATED)
    assert PREFLIGHT_CONTAINER not in [c["name"] for c in init_containers(plain)]


def started(manifest_: dict[str, Any]) -> dict[str, Any]:
    plan = plan_for(manifest_, [], NOW, networks=GKE_NETWORKS)
    return {**manifest_, "status": plan.status}


def test_a_passed_preflight_lands_in_status_with_an_event_once() -> None:
    spec = job(**ACCELERATED)
    pods = pods_of(spec)
    children = [preflight_ended(pod, 0, preflight_outcome("PreflightPassed")) for pod in pods.values()]
    plan = plan_for(started(spec), children, NOW + timedelta(seconds=10), networks=GKE_NETWORKS)
    assert plan.status is not None
    assert plan.status["preflight"] == {
        "attempt": 1, "passed": True, "message": "all-reduce busbw 41.25 GB/s at 64 MiB over 2 ranks, transport GPUDirectTCPX_v7",
        "busBandwidthGbps": 41.25, "algBandwidthGbps": 41.25, "sizeBytes": 67108864, "transport": "GPUDirectTCPX_v7",
        "backend": "nccl", "worldSize": 2, "seconds": 4.5,
    }  # fmt: skip
    assert (
        Event("Normal", "PreflightPassed", f"attempt 1: {plan.status['preflight']['message']}") in plan.events
    )
    again = plan_for(
        {**spec, "status": plan.status}, children, NOW + timedelta(seconds=20), networks=GKE_NETWORKS
    )
    assert again.status is None and again.events == []


def test_a_failed_preflight_fails_the_job_fast_naming_the_transport_and_figure_counted_apart() -> None:
    spec = job(**ACCELERATED)
    fell_back = preflight_outcome("PreflightFailed", busbw=2.1, transport="Socket")
    children = [preflight_ended(pod, 3, fell_back) for pod in pods_of(spec).values()]
    plan = plan_for(started(spec), children, NOW + timedelta(seconds=10), networks=GKE_NETWORKS)
    assert plan.status is not None and plan.status["phase"] == "Failed"
    failed = next(c for c in plan.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PreflightFailed"
    assert failed["message"].startswith("pod mnist-")
    assert "PreflightFailed, exit code 3" in failed["message"] and "2.1 GB/s" in failed["message"]
    assert "transport Socket" in failed["message"]
    # Counted apart, as the platform's failure: nothing charged to backoffLimit, maxPreemptions or total.
    assert plan.status["restarts"] == {"failures": 0, "preemptions": 0, "total": 0, "preflightFailures": 1}
    assert plan.status["preflight"]["passed"] is False


def test_a_preflight_that_crashed_is_an_ordinary_failure_with_its_log_tail() -> None:
    spec = job(**ACCELERATED)
    crash = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'dtjob_trainer'"
    children = [preflight_ended(pod, 1, crash) for pod in pods_of(spec).values()]
    plan = plan_for(started(spec), children, NOW + timedelta(seconds=10), networks=GKE_NETWORKS)
    assert plan.status is not None and plan.status["lastRestart"]["reason"] == "PodFailed"
    assert plan.status["lastRestart"]["message"].endswith("No module named 'dtjob_trainer'")
    assert "preflight" not in plan.status


@pytest.mark.parametrize("message", ["", "not json", '{"reason": "Completed"}', "[1]"])
def test_a_message_without_a_verdict_has_no_figures(message: str) -> None:
    assert result_of(message) is None
