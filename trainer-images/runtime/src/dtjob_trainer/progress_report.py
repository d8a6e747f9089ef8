"""This pod's training progress, POSTed to the operator's intake (docs/progress.md), from every rank.

The operator puts the intake's URL in DTJ_PROGRESS_URL and a pod-bound token for it in the file
DTJ_PROGRESS_TOKEN_FILE. A background thread sends the latest report when it changed, at most every
DTJ_PROGRESS_INTERVAL_SECONDS (10 s by default), at once when the phase changes (a checkpoint save begins
or ends), and a last one on close. Nothing changed: nothing is sent. A report not taken is logged (once
at warning level) and sent again at the next round: progress reporting never stops training.

The protocol is tiny on purpose; a script without this runtime reports with one request:

    curl -X POST "$DTJ_PROGRESS_URL" -H "Authorization: Bearer $(cat "$DTJ_PROGRESS_TOKEN_FILE")" \\
         -H 'Content-Type: application/json' -d '{"step": 120, "totalSteps": 1000}'
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final

STARTING: Final = "starting"
TRAINING: Final = "training"
CHECKPOINTING: Final = "checkpointing"
DEFAULT_INTERVAL_SECONDS: Final = 10.0
_WINDOW_STEPS: Final = 20
# A standby replica answers 503: the Service's next connection may reach the leader.
_TRIES: Final = 3
_TIMEOUT_SECONDS: Final = 5.0

log = logging.getLogger(__name__)


class ProgressPoster:
    def __init__(
        self,
        url: str,
        token_file: Path,
        interval_s: float = DEFAULT_INTERVAL_SECONDS,
        total_steps: int | None = None,
    ) -> None:
        self._url, self._token_file, self._interval = url, token_file, interval_s
        self._report: dict[str, Any] = {"step": 0, "phase": STARTING}
        if total_steps is not None:
            self._report["totalSteps"] = total_steps
        self._sent: dict[str, Any] | None = None
        self._urgent = False
        self._recent: deque[tuple[float, int]] = deque(maxlen=_WINDOW_STEPS + 1)
        self._changed = threading.Condition()
        self._closing = False
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="progress-report", daemon=True)
        self._thread.start()

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] = os.environ, total_steps: int | None = None
    ) -> ProgressPoster | None:
        """A poster wired as the operator set the pod up; None when it takes no reports."""
        url, token_file = environ.get("DTJ_PROGRESS_URL"), environ.get("DTJ_PROGRESS_TOKEN_FILE")
        if not url or not token_file:
            return None
        interval = float(environ.get("DTJ_PROGRESS_INTERVAL_SECONDS") or DEFAULT_INTERVAL_SECONDS)
        return cls(url, Path(token_file), interval, total_steps)

    def record_step(
        self,
        step: int,
        epoch: int | None = None,
        loss: float | None = None,
        samples: int = 0,
        own_step_seconds: float | None = None,
    ) -> None:
        """`samples`: processed by all ranks in this step (0: unknown); `own_step_seconds`: this rank's
        own work a step, before it waits on its peers (pytorch.own_time). Cheap: on every step of every
        rank, it only records; the sending thread works out step time and throughput."""
        now = time.monotonic()
        with self._changed:
            self._recent.append((now, samples))
            report = self._report
            report["step"] = step
            if own_step_seconds is not None:
                report["ownStepSeconds"] = own_step_seconds
            if epoch is not None:
                report["epoch"] = epoch
            if loss is not None and loss == loss:  # NaN is no JSON number
                report["loss"] = loss
            if report["phase"] != TRAINING:
                report["phase"] = TRAINING
                self._urgent = True
                self._changed.notify()

    def record_total_steps(self, total_steps: int) -> None:
        """When the number of steps is known only once training begins (a framework's trainer)."""
        self._update({"totalSteps": total_steps})

    def record_checkpoint(self, step: int) -> None:
        self._update({"lastCheckpointStep": step})

    def checkpointing(self, saving: bool) -> None:
        """A save begins (True) or ends: the operator does not take a save, however long, for a hang."""
        self._update({"phase": CHECKPOINTING if saving else TRAINING})

    def close(self) -> None:
        """Send what is left, then stop."""
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._thread.join(timeout=2 * _TIMEOUT_SECONDS * _TRIES)

    def __enter__(self) -> ProgressPoster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _update(self, fields: Mapping[str, Any]) -> None:
        with self._changed:
            if fields.get("phase", self._report["phase"]) != self._report["phase"]:
                self._urgent = True
            self._report.update(fields)
            if self._urgent:
                self._changed.notify()

    def _snapshot(self) -> dict[str, Any]:
        """The report to send, with the step time and throughput over the last steps (lock held)."""
        report = dict(self._report)
        if len(self._recent) > 1 and (elapsed := self._recent[-1][0] - self._recent[0][0]) > 0:
            # The first entry only marks the window's start.
            report["stepSeconds"] = elapsed / (len(self._recent) - 1)
            if samples := sum(n for _, n in list(self._recent)[1:]):
                report["samplesPerSecond"] = samples / elapsed
        return report

    def _run(self) -> None:
        last = float("-inf")
        while True:
            with self._changed:
                remaining = last + self._interval - time.monotonic()
                self._changed.wait_for(
                    lambda: self._closing or self._urgent,
                    timeout=remaining if remaining > 0 else self._interval,
                )
                due = self._urgent or self._closing or time.monotonic() >= last + self._interval
                snapshot = self._snapshot()
                report = snapshot if due and snapshot != self._sent else None
                self._urgent = False
                closing = self._closing
            if report is not None:
                if self._post(report):  # one not taken goes again with the next round, changed or not
                    self._sent = report
                last = time.monotonic()
            if closing:
                return

    def _post(self, report: Mapping[str, Any]) -> bool:
        """Whether the intake took the report."""
        body = json.dumps(report).encode()
        for attempt in range(1, _TRIES + 1):
            try:
                token = self._token_file.read_text().strip()  # the kubelet rotates it
                request = urllib.request.Request(
                    self._url,
                    data=body,
                    method="POST",
                    headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=_TIMEOUT_SECONDS):
                    return True
            except urllib.error.HTTPError as err:
                if err.code == 503 and attempt < _TRIES:
                    continue
                self._warn(f"{err.code} {err.read().decode(errors='replace').strip()}")
                return False
            except OSError as err:
                self._warn(repr(err))
                return False
        return False

    def _warn(self, what: str) -> None:
        # Once at warning level: a misconfigured intake must not flood the training log.
        log.log(logging.DEBUG if self._warned else logging.WARNING, "progress report not taken: %s", what)
        self._warned = True
