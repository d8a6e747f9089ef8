"""The console's views of jobs, pods and Events (dtjob.console.views), rendered as a terminal would show
them, from objects shaped as the apiserver returns them."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console, RenderableType

from dtjob.console import views

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def render(renderable: RenderableType) -> str:
    console = Console(width=200, record=True, color_system=None, force_terminal=False)
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()


def job(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "ddp",
            "namespace": "team-a",
            "uid": "u1",
            "creationTimestamp": "2026-11-25T11:00:00Z",
        },
        "spec": {
            "framework": "PyTorch",
            "replicas": [{"role": "Worker", "count": 3}, {"role": "Master"}],
        },
        "status": status,
    }


def pod(
    role: str, index: int, attempt: int, state: dict[str, Any] | None = None, node: str = "n1"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"ddp-{role.lower()}-{index}",
            "uid": f"{role}{index}{attempt}",
            "creationTimestamp": "2026-11-25T11:58:00Z",
            "labels": {
                "training.dtjob.io/job-name": "ddp",
                "training.dtjob.io/role": role,
                "training.dtjob.io/replica-index": str(index),
                "training.dtjob.io/attempt": str(attempt),
            },
        },
        "spec": {"nodeName": node, "containers": [{"name": "sidecar"}, {"name": "trainer"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "trainer", "restartCount": 0, "state": state or {"running": {}}}],
        },
    }


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (119, "119s"), (125, "2m5s"), (600, "10m"), (3 * 3600 + 60, "3h1m"), (30 * 3600, "30h"),
     (3 * 86400 + 7200, "3d2h"), (20 * 86400, "20d")],
)  # fmt: skip
def test_durations_read_as_kubectls(seconds: int, shown: str) -> None:
    assert views.duration(seconds) == shown


def test_restarts_name_their_causes_and_count_only_restarts() -> None:
    assert views.restarts(job()) == "0"
    counted = job(restarts={"failures": 2, "preemptions": 1, "total": 3, "preflightFailures": 1})
    assert views.restarts(counted) == "3 (2 failures, 1 preemption)"
    assert views.restarts(job(restarts={"hangs": 1, "slowRanks": 1, "total": 2})) == "2 (1 hang, 1 slow rank)"
    # An elastic gang's replaced members are no restart: the total leaves them out.
    elastic = job(restarts={"preemptions": 1, "total": 1, "replacements": 2})
    assert views.restarts(elastic) == "1 (1 preemption, 2 members replaced)"


def test_progress_is_the_current_attempts_only() -> None:
    report = {
        "attempt": 2,
        "step": 120,
        "totalSteps": 1380,
        "percent": 8.7,
        "loss": 0.412345,
        "updatedAt": "x",
    }
    assert views.progress(job(attempt=2, progress=report)) == "120/1380 (8.7%)"
    assert views.loss(job(attempt=2, progress=report)) == "0.4123"
    assert views.progress(job(attempt=3, progress=report)) == "-"  # the new attempt has not reported yet
    assert (
        views.progress(job(attempt=2, progress={**report, "totalSteps": None, "percent": None})) == "step 120"
    )
    assert views.progress(job()) == "-"


def test_the_jobs_table_has_a_row_a_job_and_a_namespace_column_only_across_namespaces() -> None:
    other = job(phase="Failed", attempt=4, replicasReady="0/4")
    other["metadata"] = {**other["metadata"], "name": "bert", "namespace": "team-b"}
    running = job(phase="Running", attempt=2, replicasReady="4/4", restarts={"preemptions": 1, "total": 1},
                  progress={"attempt": 2, "step": 50, "totalSteps": 100, "percent": 50.0, "updatedAt": "x"})  # fmt: skip
    lines = render(views.jobs_table([other, running], NOW, with_namespace=True)).splitlines()
    assert lines[0].split() == [
        "NAMESPACE",
        "NAME",
        "PHASE",
        "READY",
        "ATTEMPT",
        "RESTARTS",
        "PROGRESS",
        "LOSS",
        "AGE",
    ]
    assert lines[1].split() == ["team-a", "ddp", "Running", "4/4", "2", "1", "(1", "preemption)", "50/100", "(50%)",
                                "-", "60m"]  # fmt: skip
    assert lines[2].split()[:5] == ["team-b", "bert", "Failed", "0/4", "4"]
    assert render(views.jobs_table([running], NOW, with_namespace=False)).splitlines()[0].startswith("NAME")


def test_ranks_follow_the_frameworks_role_order_then_the_index() -> None:
    pods = [pod("Worker", 1, 1), pod("Worker", 0, 1), pod("Master", 0, 1), pod("Worker", 2, 1)]
    assert [views.rank(job(), p) for p in pods] == [2, 1, 0, 3]
    ordered = views.in_rank_order(job(), [pod("Worker", 0, 2), *pods])
    assert [(views.attempt_of(p), views.member(p)) for p in ordered] == [
        (1, "master-0"), (1, "worker-0"), (1, "worker-1"), (1, "worker-2"), (2, "worker-0"),
    ]  # fmt: skip
    stranger = pod("Worker", 7, 1)
    assert views.rank(job(), {**stranger, "metadata": {**stranger["metadata"], "labels": {}}}) is None


@pytest.mark.parametrize(
    ("state", "shown"),
    [({"running": {}}, "Running"), ({"waiting": {"reason": "ContainerCreating"}}, "ContainerCreating"),
     ({"terminated": {"reason": "Error", "exitCode": 1}}, "Error (exit 1)"),
     ({"terminated": {"reason": "Completed", "exitCode": 0}}, "Completed (exit 0)")],
)  # fmt: skip
def test_a_pods_state_is_its_trainer_containers(state: dict[str, Any], shown: str) -> None:
    assert views.pod_state(pod("Worker", 0, 1, state)) == shown


def test_an_unscheduled_pod_says_why_and_a_deleted_one_terminates() -> None:
    pending = pod("Worker", 0, 1)
    pending["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}  # fmt: skip
    assert views.pod_state(pending) == "Pending (Unschedulable)"
    leaving = copy.deepcopy(pending)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-25T11:59:00Z"
    assert views.pod_state(leaving) == "Terminating"


def test_describe_shows_why_the_gang_last_restarted_its_conditions_pods_and_events() -> None:
    described = job(
        phase="Running", attempt=2, replicasReady="4/4", startTime="2026-11-25T11:01:00Z",
        restarts={"failures": 1, "total": 1},
        lastRestart={"reason": "PodFailed", "message": "pod ddp-worker-1: Error (exit 1)",
                     "time": "2026-11-25T11:58:00Z", "step": 220,
                     "failures": [{"reason": "Error", "exitCode": 1, "error": "RuntimeError: boom",
                                   "where": "train.py:42"}]},
        progress={"attempt": 2, "step": 300, "totalSteps": 1000, "percent": 30.0, "loss": 0.25,
                  "stepSeconds": 0.5, "lastCheckpointStep": 280, "updatedAt": "2026-11-25T11:59:50Z"},
        conditions=[{"type": "Running", "status": "True", "reason": "AllPodsRunning", "message": "4/4 running",
                     "lastTransitionTime": "2026-11-25T11:58:30Z"}],
        avoidedNodes=["gke-slow-1"],
        goodput={"since": "2026-11-25T11:01:00Z", "asOf": "2026-11-25T11:59:50Z", "productiveSeconds": 3000,
                 "wallSeconds": 3530, "percent": 85.0, "restartSeconds": 25.0,
                 "lastRestart": {"attempt": 2, "reason": "PodFailed", "restartedAt": "2026-11-25T11:58:00Z",
                                 "detectionSeconds": 2.0, "teardownSeconds": 5.0, "startSeconds": 5.0,
                                 "restoreSeconds": 8.0, "lostWorkSeconds": 5.0, "totalSeconds": 25.0,
                                 "stoppedAtStep": 220, "resumedFromStep": 210}},
    )  # fmt: skip
    events = [{"metadata": {"creationTimestamp": "x"}, "type": "Warning", "reason": "GangRestart",
               "message": "restarting the gang", "lastTimestamp": "2026-11-25T11:58:00Z"}]  # fmt: skip
    text = render(views.describe(described, [pod("Master", 0, 2, node="gke-a")], events, NOW))
    for expected in (
        "Attempt    2", "Step             300/1000 (30%)", "Last checkpoint  step 280", "Step advanced    10s ago",
        "Restarts       1 (1 failure)", "Last restart   PodFailed, 2m ago at step 220",
        "Why            pod ddp-worker-1: Error (exit 1)",
        "Failed with    Error (exit 1): RuntimeError: boom at train.py:42", "Avoided nodes  gke-slow-1",
        "Goodput        85.0% (3000.0s of 3530.0s trained)",
        "Restart cost   25.0s: detection 2.0s, teardown 5.0s, start 5.0s, restore 8.0s, lost work 5.0s; "
        "stopped at step 220; resumed from step 210",
        "Running  True    AllPodsRunning  90s  4/4 running",
        "ddp-master-0  0     2        Running  no     0         gke-a  2m",
        "2m   Warning  GangRestart  restarting the gang",
    ):  # fmt: skip
        assert expected in text, f"{expected!r} not in:\n{text}"


def test_describe_says_none_where_a_job_has_no_conditions_pods_or_events() -> None:
    text = render(views.describe(job(phase="Pending"), [], [], NOW))
    assert "Conditions\nnone\n\nPods\nnone\n\nEvents\nnone" in text and "Progress" not in text


def test_a_watch_has_a_line_for_each_happening_and_none_for_a_mere_step() -> None:
    first = job(phase="Pending", attempt=1)
    running = job(phase="Running", attempt=1, progress={"attempt": 1, "step": 5, "updatedAt": "x"})
    stepped = job(phase="Running", attempt=1, progress={"attempt": 1, "step": 9, "updatedAt": "x"})
    slow = {"type": "SlowRank", "status": "True", "message": "ddp-worker-2 on n3 is slow"}
    slowed = job(phase="Running", attempt=1, conditions=[slow])
    restarted = job(
        phase="Restarting", attempt=2, restarts={"failures": 1, "total": 1},
        lastRestart={"reason": "PodFailed", "message": "pod ddp-worker-1: Error (exit 1)", "time": "x"},
    )  # fmt: skip
    failed = job(phase="Failed", attempt=2, conditions=[
        {"type": "Failed", "status": "True", "message": "backoffLimit 1 reached"}])  # fmt: skip
    assert views.happenings(None, first) == ["Pending, attempt 1"]
    assert views.happenings(first, running) == ["Pending -> Running"]
    assert views.happenings(running, stepped) == []
    assert views.happenings(stepped, slowed) == ["SlowRank: ddp-worker-2 on n3 is slow"]
    assert views.happenings(slowed, restarted) == [
        "attempt 2 began: PodFailed: pod ddp-worker-1: Error (exit 1)", "Running -> Restarting", "SlowRank cleared",
    ]  # fmt: skip
    assert views.happenings(restarted, failed) == ["Restarting -> Failed: backoffLimit 1 reached"]


def test_the_progress_line_says_the_step_the_loss_and_the_time_left_as_of_the_last_report() -> None:
    report = {"attempt": 2, "step": 250, "totalSteps": 1000, "percent": 25.0, "loss": 0.412345,
              "eta": "2026-11-25T12:03:12Z", "updatedAt": "2026-11-25T12:02:00Z"}  # fmt: skip
    running = job(phase="Running", attempt=2, replicasReady="2/2", progress=report)
    assert views.progress_line(running) == (
        "Running, attempt 2, ready 2/2, step 250/1000 (25%), loss 0.4123, 72s left, restarts 0"
    )
    # No time left before this attempt's first report with an ETA, nor once the job ended.
    without_eta = job(phase="Running", attempt=2, progress={**report, "eta": None})
    assert (
        views.progress_line(without_eta)
        == "Running, attempt 2, ready -, step 250/1000 (25%), loss 0.4123, restarts 0"
    )
    assert views.time_left(job(phase="Restarting", attempt=3, progress=report)) is None
    assert views.time_left(job(phase="Succeeded", attempt=2, progress=report)) is None
    assert (
        views.time_left(job(phase="Running", attempt=2, progress={**report, "eta": "2026-11-25T12:20:00Z"}))
        == "18m"
    )


def test_a_watch_log_prints_the_happenings_and_the_progress_line_only_when_it_changed() -> None:
    pending = job(phase="Pending", attempt=1)
    running = job(phase="Running", attempt=1, replicasReady="2/2")
    stepped = job(
        phase="Running", attempt=1, replicasReady="2/2", progress={"attempt": 1, "step": 9, "updatedAt": "x"}
    )
    assert views.log_lines(None, pending) == [
        "Pending, attempt 1", "Pending, attempt 1, ready -, step -, loss -, restarts 0"
    ]  # fmt: skip
    assert views.log_lines(pending, running) == [
        "Pending -> Running", "Running, attempt 1, ready 2/2, step -, loss -, restarts 0"
    ]  # fmt: skip
    assert views.log_lines(running, running) == []
    assert views.log_lines(running, stepped) == ["Running, attempt 1, ready 2/2, step 9, loss -, restarts 0"]


def test_the_watch_frame_shows_the_state_a_bar_for_the_steps_and_the_latest_happenings() -> None:
    running = job(phase="Running", attempt=2, replicasReady="4/4", restarts={"preemptions": 1, "total": 1},
                  progress={"attempt": 2, "step": 250, "totalSteps": 1000, "percent": 25.0, "loss": 1.5,
                            "eta": "2026-11-25T12:30:00Z", "updatedAt": "x"})  # fmt: skip
    seen = [(f"11:{m:02d}:00", f"happening {m}") for m in range(10)]
    text = render(views.watch_frame(running, seen, NOW))
    for expected in ("team-a/ddp", "Phase     Running", "Attempt   2", "Ready     4/4", "Step      250/1000 (25%)",
                     "Loss      1.5", "ETA       2026-11-25T12:30:00Z", "Restarts  1 (1 preemption)",
                     "11:09:00 happening 9"):  # fmt: skip
        assert expected in text, f"{expected!r} not in:\n{text}"
    assert "happening 1" not in text  # only the latest eight
    assert "━" in text  # the bar


def test_a_log_line_is_labelled_with_its_attempt_and_member_and_coloured_by_rank() -> None:
    prefixes = [views.log_prefix(job(), pod("Worker", i, 2)) for i in range(3)]
    assert [p.plain for p in prefixes] == [f"[attempt 2 worker-{i}] " for i in range(3)]
    assert len({str(p.style) for p in prefixes}) == 3


def test_a_message_carrying_a_traceback_tail_reads_as_one_line_in_a_watch() -> None:
    message = 'pod ddp-worker-0: Error, exit code 1, on node n1: ...\n:   File "x.py", line 3\n: PermissionError: no\n'
    assert (
        views.one_line(message) == "pod ddp-worker-0: Error, exit code 1, on node n1 ... PermissionError: no"
    )
    assert views.one_line("just this") == "just this"


def test_brackets_in_messages_are_text_not_markup() -> None:
    failed = job(phase="Failed", conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "[/__w/pytorch/gloo/pair.cc:561] Connection closed by peer [bold]"}])  # fmt: skip
    assert "[/__w/pytorch/gloo/pair.cc:561] Connection closed by peer [bold]" in render(
        views.describe(failed, [], [], NOW)
    )
