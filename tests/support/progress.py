"""Progress reports in unit tests: a job with a progress deadline (JOB, its MASTER and WORKER pods), a
time `at` seconds after NOW, and a ledger fed reports in order."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dtjob.core.progress import Ledger, Report, received
from tests.support.builders import NOW, SHARED_CHECKPOINTS, manifest

DEADLINE = 60
JOB = manifest(
    ("Master", 1),
    ("Worker", 1),
    checkpoint=SHARED_CHECKPOINTS,
    runPolicy={"progressDeadlineSeconds": DEADLINE, "maxHangRestarts": 1},
)
MASTER, WORKER = "mnist-master-0", "mnist-worker-0"


def at(seconds: float) -> Any:
    return NOW + timedelta(seconds=seconds)


def reports(*entries: tuple[float, str, dict[str, Any]], attempt: int = 1) -> Ledger | None:
    """A ledger fed (seconds after NOW, pod, report) in order."""
    ledger: Ledger | None = None
    for seconds, pod, body in entries:
        ledger = received(ledger, attempt, pod, Report.model_validate(body), at(seconds))
    return ledger
