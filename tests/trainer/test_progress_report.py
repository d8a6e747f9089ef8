"""The runtime's ProgressPoster against a local HTTP server standing in for the operator's intake: what
it sends and when (the intake itself, with real tokens, is tests/integration/test_progress_intake.py)."""

from __future__ import annotations

from pathlib import Path

from dtjob_trainer.progress_report import ProgressPoster

from dtjob.core.progress import Phase, Report
from tests.support.local_gang import RUN_TIMEOUT_S, local_job, rendered_pods, running
from tests.support.local_intake import intake, last_reports, reporting_to
from tests.support.waiting import wait_for

INTERVAL_S = 0.3


def test_reports_go_on_change_at_once_on_a_phase_change_and_once_more_on_close(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")
    with intake() as (server, url):
        poster = ProgressPoster(url, token, INTERVAL_S, total_steps=100)
        poster.record_step(1, epoch=0, loss=2.5, samples=64)  # starting -> training: sent at once
        wait_for(lambda: server.bodies(), "the first report")
        for step in range(2, 6):
            poster.record_step(step, epoch=0, loss=2.0, samples=64)
        wait_for(lambda: server.bodies()[-1]["step"] == 5, "the latest step, within an interval")
        token.write_text("rotated-token\n")  # the kubelet rotates it: each report reads it afresh
        poster.checkpointing(True)
        wait_for(lambda: server.bodies()[-1]["phase"] == "checkpointing", "the save's start, at once")
        poster.record_checkpoint(5)
        poster.checkpointing(False)
        wait_for(lambda: server.bodies()[-1]["phase"] == "training", "the save's end, at once")
        sent = len(server.bodies())
        poster.close()  # nothing changed since the last report: nothing more is sent
        assert len(server.bodies()) == sent
    reports = [Report.model_validate(body) for body in server.bodies()]  # the operator's own model
    assert reports[0].step == 1 and reports[0].total_steps == 100 and reports[0].phase == Phase.TRAINING
    assert reports[-1].last_checkpoint_step == 5 and reports[-1].step_seconds is not None
    assert reports[-1].samples_per_second is not None and reports[-1].samples_per_second > 0
    steps = [r.step for r in reports]
    assert steps == sorted(steps) and len(steps) < 8, steps  # at most one report an interval, not one a step
    tokens = [header for header, _ in server.received]
    assert tokens[0] == "Bearer first-token" and tokens[-1] == "Bearer rotated-token"


def test_a_standby_is_retried_at_once_and_a_report_not_taken_goes_again(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    with intake() as (server, url):
        server.answers = [503, 500]  # a standby, then a failure: the report is retried, then resent
        poster = ProgressPoster(url, token, INTERVAL_S)
        poster.record_step(7)
        wait_for(lambda: len(server.bodies()) >= 3, "the report taken at last")
        poster.close()
    assert [body["step"] for body in server.bodies()] == [7, 7, 7]


def test_the_last_report_is_sent_on_close() -> None:
    with intake() as (server, url):
        token = Path("/dev/null")
        poster = ProgressPoster(url, token, interval_s=3600)  # no round would come in time
        poster.record_step(1)
        wait_for(lambda: server.bodies(), "the first report")
        poster.record_step(2)
        poster.close()
    assert server.bodies()[-1]["step"] == 2


def test_without_an_intake_no_poster_is_made() -> None:
    assert ProgressPoster.from_environ({}) is None
    assert ProgressPoster.from_environ({"DTJ_PROGRESS_URL": "http://x/v1/progress"}) is None


def test_a_rank_made_slow_reports_a_long_own_step_time_and_its_peer_a_short_one(tmp_path: Path) -> None:
    """The DDP example as a local gang, rank 1 sleeping 20 ms in every step: both ranks' steps last as
    long (rank 0 waits for rank 1 in the all-reduce), but each reports its own work before it (the
    runtime's DDP communication hook), which tells the slow one."""
    job = local_job("ddp-digits.yaml", tmp_path)
    trainer = job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    trainer["args"] = ["--epochs", "3", "--checkpoint-every", "1000", "--slow-rank", "1",
                       "--slow-step-seconds", "0.02", "--min-accuracy", "0"]  # fmt: skip
    pods = rendered_pods(job, 1)
    with intake() as (server, url):
        reporting_to(url, pods, tmp_path)
        with running(pods, tmp_path) as gang:
            codes = gang.wait_all(RUN_TIMEOUT_S)
            assert set(codes.values()) == {0}, f"exit codes {codes}\n{gang.logs()}"
    last = last_reports(server)
    fast, slow = (last[pod["metadata"]["name"]]["ownStepSeconds"] for pod in pods)
    assert slow >= 0.02 and slow > 3 * fast, (fast, slow)
    Report.model_validate(last[pods[1]["metadata"]["name"]])  # the intake takes the field
