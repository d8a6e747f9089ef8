"""The operator run in-process (`kopf run --namespace`), as integration and e2e tests and benches run it,
and what it did: its reconcile passes and its log records."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest
from kopf.testing import KopfRunner
from prometheus_client import REGISTRY

from localcluster import Cluster
from localcluster.layout import NODE_IP
from tests.support.jobs import Jobs
from tests.support.ports import free_port
from tests.support.waiting import wait_for, watching


@contextlib.contextmanager
def running_operator(cluster: Cluster, namespace: str) -> Iterator[KopfRunner]:
    """`kopf run --namespace` in this process: Kopf's own option names what the operator's readers watch."""
    args = ["run", "--standalone", "--namespace", namespace, "-m", "dtjob.runtime"]
    with KopfRunner(args, timeout=60) as runner, watching(lambda: _stopped(runner)):
        yield runner
    # A clean stop, and no handler ever crashed with a traceback.
    assert runner.exception is None, runner.exception
    assert "Traceback" not in runner.output, runner.output[-4000:]


def _stopped(runner: KopfRunner) -> str | None:
    """Why the in-process operator is no longer running (it failed to log in, a start-up check raised),
    while the test still runs beside it; None while it runs."""
    if not runner.future.done():
        return None
    if (error := runner.future.exception()) is not None:
        return f"the in-process operator stopped: {error!r}"
    result = runner.future.result()
    return f"the in-process operator stopped: {result.exception!r}; its output ends: {result.output[-1500:]}"


@contextlib.contextmanager
def operator_taking_reports(
    cluster: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch, **env: str
) -> Iterator[tuple[KopfRunner, str]]:
    """`running_operator` with its progress intake on a free port (the pods reach it at the node's
    address), writing status on reports at most every second; yields it and the intake's URL."""
    port = free_port()
    url = f"http://{NODE_IP}:{port}/v1/progress"
    for name, value in {"DTJOB_PROGRESS_PORT": str(port), "DTJOB_PROGRESS_URL": url,
                        "DTJOB_PROGRESS_STATUS_SECONDS": "1", **env}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    with running_operator(cluster, namespace) as runner:
        yield runner, url


def passes() -> float:
    """Reconcile passes the in-process operator has finished so far."""
    return REGISTRY.get_sample_value("dtjob_reconcile_duration_seconds_count") or 0.0


def wake(jobs: Jobs, name: str, n: int) -> None:
    """Touch the job (an annotation: a job event) and wait until the operator ran a pass on it."""
    before = passes()
    jobs.patch(name, {"metadata": {"annotations": {"test.dtjob.io/poke": str(n)}}})
    wait_for(lambda: passes() > before, "a pass after the job changed")


class Records(logging.Handler):
    """The operator's log records as they happen (it runs in this process)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
