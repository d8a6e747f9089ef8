"""Rank 0's progress endpoint speaks the Prometheus text format."""

from __future__ import annotations

import urllib.request

from dtjob_trainer.progress import ProgressReporter

from tests.support.local_gang import scrape
from tests.support.ports import free_port


def test_progress_is_served_in_prometheus_text_format() -> None:
    with ProgressReporter(free_port(), attempt=2) as reporter:
        reporter.record_step(step=1, epoch=0, loss=2.5, samples=64)
        reporter.record_step(step=2, epoch=1, loss=1.25, samples=64)
        reporter.record_checkpoint(2)
        with urllib.request.urlopen(f"http://127.0.0.1:{reporter.port}/metrics", timeout=5) as response:
            content_type = response.headers["Content-Type"]
        metrics = scrape(reporter.port)
    assert content_type.startswith("text/plain")
    assert metrics["dtjob_trainer_step"] == 2
    assert metrics["dtjob_trainer_epoch"] == 1
    assert metrics["dtjob_trainer_loss"] == 1.25
    assert metrics["dtjob_trainer_samples_total"] == 128
    assert metrics["dtjob_trainer_samples_per_second"] > 0
    assert metrics["dtjob_trainer_last_checkpoint_step"] == 2
    assert metrics["dtjob_trainer_attempt"] == 2


def test_before_the_first_checkpoint_the_checkpoint_step_is_minus_one() -> None:
    with ProgressReporter(free_port()) as reporter:
        assert scrape(reporter.port)["dtjob_trainer_last_checkpoint_step"] == -1
