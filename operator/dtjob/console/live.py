"""`dtjob watch`: a job as it changes, until it ends. At a terminal, a live view redrawn on every change
(and every second, for the ages); elsewhere (a pipe, a CI log) one timestamped line per happening and per
new step."""

from __future__ import annotations

import queue
from datetime import UTC, datetime
from typing import Any, Final

from rich.console import Console
from rich.live import Live

from dtjob.console import views
from dtjob.console.cluster import Reader, background
from dtjob.console.views import Obj

REDRAW_SECONDS: Final = 1.0


def _clock(now: datetime) -> str:
    return now.astimezone().strftime("%H:%M:%S")


def watch(reader: Reader, name: str, console: Console, errors: Console) -> int:
    """0 when the job succeeds, 1 when it fails, is invalid or is deleted."""
    reader.job(name)  # a clear error for a job that does not exist, before anything is drawn
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    background(reader.watch_job(name), events, "job")
    seen: list[tuple[str, str]] = []
    job: Obj | None = None
    live = Live(console=console, auto_refresh=False, transient=False) if console.is_terminal else None
    if live is not None:
        live.start()
    try:
        while True:
            try:
                kind, item = events.get(timeout=REDRAW_SECONDS)
            except queue.Empty:
                kind, item = "tick", job
            now = datetime.now(UTC)
            if kind.endswith("-error"):
                raise item
            if kind == "job" and item is None:
                errors.print(f"{name} was deleted", highlight=False)
                return 1
            if kind == "job":
                seen += [(_clock(now), line) for line in views.happenings(job, item)]
                if live is None:
                    for line in views.log_lines(job, item):
                        console.print(f"{_clock(now)} {line}", highlight=False, soft_wrap=True)
                job = item
            if job is None:
                continue
            if live is not None:
                live.update(views.watch_frame(job, seen, now), refresh=True)
            if views.phase(job) in views.TERMINAL_PHASES:
                return 0 if views.phase(job) == "Succeeded" else 1
    finally:
        if live is not None:
            live.stop()
