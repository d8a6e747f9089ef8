"""The trainers' progress reports routed to their jobs: the reporting pod looked up in the pod cache, the
report into the job's ledger, and the job's loop woken when the report is news."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime

from dtjob.core import progress
from dtjob.core.names import ATTEMPT_LABEL
from dtjob.kube.caches import JobKey
from dtjob.kube.intake import Reporter
from dtjob.kube.reads import PodIdentity
from dtjob.runtime.state import Runtime, wake


def reporter(runtime: Runtime, identity: PodIdentity) -> Reporter | None:
    """The job pod a progress token was issued to, if the pod cache has that very pod (same uid)."""
    if runtime.caches is None:
        return None
    key = f"{identity.namespace}/{identity.pod}"
    job, essentials = runtime.caches.pods.group(key), runtime.caches.pods.get(key)
    if job is None or essentials is None or job not in runtime.jobs:
        return None
    meta = json.loads(essentials)["metadata"]
    attempt = (meta.get("labels") or {}).get(ATTEMPT_LABEL, "")
    if meta.get("uid") != identity.pod_uid or not attempt.isdigit():
        return None
    return Reporter(identity.namespace, job[1], identity.pod, int(attempt))


def take_report(runtime: Runtime, reporter: Reporter, report: progress.Report) -> None:
    """Into the job's ledger; the job's loop is woken by the first report of an attempt or of a pod, by
    a change of phase, and otherwise at most every progress_status_seconds (each wake may write status):
    a report in between wakes it at the end of that interval."""
    key = (reporter.namespace, reporter.job)
    before = runtime.ledgers.get(key)
    ledger = progress.received(before, reporter.attempt, reporter.pod, report, datetime.now(UTC))
    if ledger is None:
        return  # a pod of an attempt that is over, still running down
    runtime.ledgers[key] = ledger
    previous = (
        before.pods.get(reporter.pod) if before is not None and before.attempt == ledger.attempt else None
    )
    news = previous is None or previous.report.phase != report.phase
    interval = runtime.config.progress_status_seconds
    delay = progress.wake_delay(news, runtime.progress_woken.get(key), time.monotonic(), interval)
    if delay <= 0:
        _wake_for_progress(runtime, key)
    elif key not in runtime.progress_due:
        loop = asyncio.get_running_loop()
        runtime.progress_due[key] = loop.call_later(delay, _wake_for_progress, runtime, key)


def _wake_for_progress(runtime: Runtime, key: JobKey) -> None:
    if (due := runtime.progress_due.pop(key, None)) is not None:
        due.cancel()  # a no-op when it is the one firing now
    runtime.progress_woken[key] = time.monotonic()
    wake(runtime, key)
