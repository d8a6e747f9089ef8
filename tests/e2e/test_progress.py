"""Training progress and hang detection with real pods and real training (tier C).

The operator takes progress reports (its intake on a port of this machine, which the pods reach at the
node's address); the trainers report with their projected, pod-bound token, checked by the apiserver's
TokenReview. The DDP example's status.progress advances while it runs and ends at its last step; a rank
made to hang is restarted by progressDeadlineSeconds and the gang resumes from its checkpoint, while a
checkpoint save longer than the deadline is not taken for a hang.
"""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from dtjob.api import parse_timestamp
from hack import images
from localcluster import Cluster
from tests.support.ddp_digits import result_line
from tests.support.ddp_progress import STEPS_PER_EPOCH, example, progress_of
from tests.support.jobs import Jobs
from tests.support.operator import operator_taking_reports
from tests.support.ports import free_port
from tests.support.reads import wait_event
from tests.support.waiting import wait_for


def scraped(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


# The ETA is checked against the real step rate, which other trainings on the node or on the machine
# would change.
@pytest.mark.cluster_wide
@pytest.mark.quiet
def test_the_status_shows_the_steps_as_they_advance_and_the_last_step_at_the_end(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    epochs = 400  # about 40 s of training on this machine: time for the ETA to be judged
    total = epochs * STEPS_PER_EPOCH
    job = example("progress", ["--epochs", str(epochs), "--checkpoint-every", "500"])
    images.ensure(cluster_c, images.TORCH_TRAINER)
    seen: list[dict[str, Any]] = []
    etas: list[tuple[datetime, datetime]] = []

    def watched(progress: dict[str, Any] | None) -> dict[str, Any] | None:
        if progress and (not seen or progress != seen[-1]):
            seen.append(progress)
            if progress.get("eta") and total / 2 <= progress["step"] < total:
                etas.append((datetime.now(UTC), parse_timestamp(progress["eta"])))
        return progress

    with operator_taking_reports(cluster_c, namespace, monkeypatch):
        jobs.create(job)
        wait_for(
            lambda: (p := watched(progress_of(jobs, "progress"))) and p["step"] >= 1, "a first step", 300
        )
        wait_for(
            lambda: watched(progress_of(jobs, "progress")) and jobs.condition("progress", "Succeeded"),
            "the job to succeed", 600, interval=0.5,
        )  # fmt: skip
    final = progress_of(jobs, "progress")
    assert final is not None
    finished = parse_timestamp(final["updatedAt"])  # the last step's report: training's end
    assert (final["step"], final["totalSteps"], final["percent"], final["attempt"]) == (
        total,
        total,
        100.0,
        1,
    )
    assert result_line(core, namespace, "progress-worker-0")["step"] == total
    steps = [p["step"] for p in seen]
    assert len(set(steps)) >= 3 and steps == sorted(steps), f"the step did not advance while it ran: {steps}"
    assert final["lastCheckpointStep"] >= total - 500 and final["samplesPerSecond"] > 0 and final["loss"] >= 0
    # The ETA, in the second half, was within 20% of the time really left when it was seen (and 3 s: the
    # status's timestamps are whole seconds, and it is written at most every second).
    assert etas, f"no ETA in the second half: {seen}"
    for when, eta in etas:
        left = (finished - when).total_seconds()
        predicted = (eta - when).total_seconds()
        assert abs(predicted - left) <= 0.2 * left + 3, f"ETA {predicted:.0f}s, really {left:.0f}s left"


def test_a_hung_rank_restarts_the_gang_from_its_checkpoint_and_a_long_save_is_not_a_hang(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    deadline = 30
    args = ["--epochs", "20", "--checkpoint-every", "20", "--slow-save-seconds", str(deadline + 5),
            "--hang-at-step", "60", "--hang-rank", "1"]  # fmt: skip
    job = example("hang", args, progressDeadlineSeconds=deadline)
    images.ensure(cluster_c, images.TORCH_TRAINER)
    with operator_taking_reports(cluster_c, namespace, monkeypatch):
        jobs.create(job)
        jobs.wait_condition("hang", "Succeeded", timeout=600)
        wait_event(core, namespace, "hang", "ProgressDeadlineExceeded", contains="last step 60")
    status = jobs.get("hang")["status"]
    # One restart, for the hang: the save at step 20, longer than the deadline, was not one.
    assert status["restarts"] == {"failures": 0, "preemptions": 0, "hangs": 1, "total": 1}, status
    assert status["lastRestart"]["reason"] == "ProgressDeadlineExceeded"
    message = status["lastRestart"]["message"]
    # DDP: rank 0 waits for the hung rank in step 61's all-reduce, so both stopped at step 60, and the
    # message blames neither (an earlier version named whichever pod's report happened to come first).
    assert "last step 60" in message and "all 2 reporting pods stopped at that step" in message, message
    resumed = result_line(core, namespace, "hang-worker-0")
    assert resumed["resumed_from_step"] == 60, resumed  # the checkpoint at step 60, before the hang
    assert status["progress"]["attempt"] == 2 and status["progress"]["step"] == 20 * STEPS_PER_EPOCH


def test_a_rank_made_slow_is_named_with_its_node_by_the_slow_rank_condition(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # Rank 1 sleeps 50 ms in every step, as a throttled GPU would make it: both ranks' steps last as long.
    args = ["--epochs", "40", "--checkpoint-every", "1000", "--slow-rank", "1", "--slow-step-seconds", "0.05"]
    job = example("slow", args)
    trainer = job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    trainer["env"].append({"name": "DTJ_PROGRESS_INTERVAL_SECONDS", "value": "2"})
    images.ensure(cluster_c, images.TORCH_TRAINER)
    metrics_port = free_port()
    with operator_taking_reports(cluster_c, namespace, monkeypatch, DTJOB_METRICS_PORT=str(metrics_port)):
        jobs.create(job)
        slow = jobs.wait_condition("slow", "SlowRank", timeout=180)
        assert slow["reason"] == "SlowRank" and slow["message"].startswith("pod slow-worker-1 on node "), slow
        assert "slow-worker-0" not in slow["message"], slow
        wait_event(core, namespace, "slow", "SlowRank", contains="slow-worker-1", timeout=30, type_="Warning")
        # Both ranks step together: the status's step time is the gang's, the slow rank's pace.
        assert (jobs.get("slow")["status"].get("progress") or {}).get("stepSeconds", 0) >= 0.05
        # The operator's /metrics, as Prometheus scrapes it, has each rank's own work: rank 1's the longer.
        own = {
            sample.labels["pod"]: sample.value
            for family in text_string_to_metric_families(scraped(metrics_port))
            for sample in family.samples
            if sample.name == "dtjob_training_own_step_seconds" and sample.labels["job"] == "slow"
        }
        assert own.keys() == {"slow-worker-0", "slow-worker-1"}, own
        assert own["slow-worker-1"] > own["slow-worker-0"] + 0.03, own
