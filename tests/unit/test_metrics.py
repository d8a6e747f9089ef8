"""record_pass: what one pass's status does to the exported metrics, read back from the registry."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from dtjob.metrics import TRAINING, record_pass
from tests.support.builders import NOW, manifest
from tests.support.progress import reports

BUSBW = "dtjob_preflight_bus_bandwidth_bytes_per_second"


def preflight_samples(namespace: str, transport: str, result: str) -> tuple[float, float]:
    """The histogram's count and sum for one label set (0 before its first observation)."""
    labels = {"namespace": namespace, "transport": transport, "result": result}
    count = REGISTRY.get_sample_value(f"{BUSBW}_count", labels) or 0.0
    total = REGISTRY.get_sample_value(f"{BUSBW}_sum", labels) or 0.0
    return count, total


def measured(busbw_gbps: float, passed: bool, transport: str) -> dict[str, Any]:
    return {"attempt": 1, "passed": passed, "busBandwidthGbps": busbw_gbps, "transport": transport}


def test_a_new_preflight_result_is_observed_once_in_bytes_per_second_by_transport_and_result() -> None:
    # The registry is the process's own: a namespace of this test's alone keeps other tests' samples out.
    job = manifest(("Worker", 2))
    job["metadata"]["namespace"] = "metrics-preflight"
    new = {"phase": "Running", "preflight": measured(41.25, True, "GPUDirectTCPX_v7")}

    record_pass(job, new, NOW)
    assert preflight_samples("metrics-preflight", "GPUDirectTCPX_v7", "passed") == (1.0, 41.25e9)
    labels = {"namespace": "metrics-preflight", "transport": "GPUDirectTCPX_v7", "result": "passed"}
    assert REGISTRY.get_sample_value(f"{BUSBW}_bucket", {**labels, "le": "2e+10"}) == 0.0
    assert REGISTRY.get_sample_value(f"{BUSBW}_bucket", {**labels, "le": "5e+10"}) == 1.0

    record_pass({**job, "status": new}, None, NOW)  # the same result again: already counted
    assert preflight_samples("metrics-preflight", "GPUDirectTCPX_v7", "passed") == (1.0, 41.25e9)

    failed = {"phase": "Failed", "preflight": {**measured(2.1, False, "Socket"), "attempt": 2}}
    record_pass({**job, "status": new}, failed, NOW)
    assert preflight_samples("metrics-preflight", "Socket", "failed") == (1.0, 2.1e9)


def test_restarts_are_counted_by_cause_hangs_included() -> None:
    job = manifest(("Worker", 2))
    job["metadata"]["namespace"] = "metrics-restarts"
    old = {"phase": "Running", "restarts": {"failures": 1, "preemptions": 0, "total": 1}}
    new = {"phase": "Restarting", "restarts": {"failures": 1, "preemptions": 1, "hangs": 1, "total": 3}}
    record_pass({**job, "status": old}, new, NOW)

    def count(reason: str) -> float | None:
        labels = {"namespace": "metrics-restarts", "framework": "PyTorch", "reason": reason}
        return REGISTRY.get_sample_value("dtjob_job_restarts_total", labels)

    assert (count("failure"), count("preemption"), count("hang")) == (None, 1.0, 1.0)


def test_the_training_gauges_show_each_pod_of_a_running_job_and_nothing_once_it_is_not_running() -> None:
    job = manifest(("Worker", 2))
    job["metadata"].update(namespace="metrics-training", name="ddp")
    ledger = reports(
        (0, "ddp-worker-0", {"step": 40, "totalSteps": 100, "stepSeconds": 0.3, "ownStepSeconds": 0.1}),
        (1, "ddp-worker-1", {"step": 41, "totalSteps": 100, "stepSeconds": 0.3, "ownStepSeconds": 0.25}),
    )
    quiet = reports((0, "quiet-worker-0", {"step": 3}))  # a script that reports its step alone
    assert ledger is not None and quiet is not None
    TRAINING.follow({("metrics-training", "ddp"): ledger, ("metrics-training", "quiet"): quiet})
    record_pass(job, {"phase": "Running"}, NOW)
    record_pass({**job, "metadata": {**job["metadata"], "name": "quiet"}}, {"phase": "Running"}, NOW)

    def gauge(name: str, job: str, pod: str) -> float | None:
        labels = {"namespace": "metrics-training", "job": job, "pod": pod}
        return REGISTRY.get_sample_value(f"dtjob_training_{name}", labels)

    assert [gauge(n, "ddp", "ddp-worker-1") for n in ("step", "total_steps", "step_seconds")] == [
        41,
        100,
        0.3,
    ]
    assert (
        gauge("own_step_seconds", "ddp", "ddp-worker-0"),
        gauge("own_step_seconds", "ddp", "ddp-worker-1"),
    ) == (
        0.1,
        0.25,
    )
    assert (
        gauge("step", "quiet", "quiet-worker-0") == 3
        and gauge("step_seconds", "quiet", "quiet-worker-0") is None
    )

    record_pass({**job, "status": {"phase": "Running"}}, {"phase": "Restarting"}, NOW)
    assert gauge("step", "ddp", "ddp-worker-0") is None  # the ended attempt's figures are not shown
    assert gauge("step", "quiet", "quiet-worker-0") == 3
    TRAINING.follow({})


def test_an_elastic_gangs_replaced_members_are_counted_apart_from_restarts() -> None:
    job = manifest(("Worker", 3))
    job["metadata"]["namespace"] = "metrics-replacements"
    old = {"phase": "Running", "restarts": {"failures": 0, "preemptions": 0, "total": 0}}
    new = {"phase": "Running", "restarts": {**old["restarts"], "replacements": 2}}
    record_pass({**job, "status": old}, new, NOW)
    record_pass({**job, "status": new}, new, NOW)  # the same count again: already counted
    labels = {"namespace": "metrics-replacements", "framework": "PyTorch"}
    assert REGISTRY.get_sample_value("dtjob_member_replacements_total", labels) == 2.0
    assert REGISTRY.get_sample_value("dtjob_job_restarts_total", {**labels, "reason": "preemption"}) is None


def test_a_restarts_cost_is_observed_by_phase_once_it_is_complete() -> None:
    job = manifest(("Worker", 2))
    job["metadata"]["namespace"] = "metrics-goodput"
    open_cost = {
        "attempt": 2,
        "reason": "Preempted",
        "detectionSeconds": 2.0,
        "restartedAt": "2030-01-01T12:00:40Z",
    }
    whole = {**open_cost, "teardownSeconds": 5.0, "startSeconds": 5.0, "restoreSeconds": 8.0,
             "lostWorkSeconds": 5.0, "totalSeconds": 25.0}  # fmt: skip

    def status(cost: dict[str, Any]) -> dict[str, Any]:
        return {"phase": "Running", "goodput": {"since": "2030-01-01T12:00:00Z", "asOf": "2030-01-01T12:00:58Z",
                                                "lastRestart": cost}}  # fmt: skip

    def observed(phase: str) -> tuple[float | None, float | None]:
        labels = {"namespace": "metrics-goodput", "framework": "PyTorch", "phase": phase}
        return (REGISTRY.get_sample_value("dtjob_restart_cost_seconds_count", labels),
                REGISTRY.get_sample_value("dtjob_restart_cost_seconds_sum", labels))  # fmt: skip

    record_pass({**job, "status": status(open_cost)}, status(open_cost), NOW)
    assert observed("detection") == (None, None)  # not complete yet
    record_pass({**job, "status": status(open_cost)}, status(whole), NOW)
    assert [observed(p) for p in ("detection", "restore", "lost_work", "total")] == [
        (1.0, 2.0), (1.0, 8.0), (1.0, 5.0), (1.0, 25.0),
    ]  # fmt: skip
    record_pass({**job, "status": status(whole)}, None, NOW)  # unchanged: not observed again
    assert observed("total") == (1.0, 25.0)
