"""Turn SIGTERM into an orderly stop: finish the step, save, exit with a code the operator understands.

The handler only records the request; the training loop acts on it at the next step boundary. A
watchdog bounds the whole thing: if the budget runs out first, the process exits with
TERMINATED_WITHOUT_CHECKPOINT (a plain termination: the previous checkpoint stays the latest one);
once the checkpoint is durable the watchdog's code becomes PREEMPTED_CHECKPOINT_SAVED, so a slow
teardown after the save cannot turn a clean stop into a failure. The outcome is also written to the
container's termination message, which survives launchers (torchrun) that replace the exit code.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from dtjob_trainer.exit_codes import PREEMPTED_CHECKPOINT_SAVED, TERMINATED_WITHOUT_CHECKPOINT

log = logging.getLogger(__name__)


class TerminationSignal:
    def __init__(self, budget_s: float, message_path: Path | None = None) -> None:
        self.budget_s = budget_s
        self._message_path = message_path
        self._received_at: float | None = None
        self._exit_code_on_expiry = TERMINATED_WITHOUT_CHECKPOINT
        self._lock = threading.Lock()
        self._previous_handler: Callable[[int, FrameType | None], Any] | int | None = signal.SIG_DFL

    def __enter__(self) -> TerminationSignal:
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        signal.signal(signal.SIGTERM, self._previous_handler)

    @property
    def requested(self) -> bool:
        return self._received_at is not None

    def seconds_since_request(self) -> float:
        return 0.0 if self._received_at is None else time.monotonic() - self._received_at

    def checkpoint_saved(self, step: int) -> None:
        """Record that the checkpoint of `step` is durable; from now on every exit path reports 200."""
        with self._lock:
            self._exit_code_on_expiry = PREEMPTED_CHECKPOINT_SAVED
        cause = (
            f"SIGTERM here, checkpoint durable {self.seconds_since_request():.2f}s after it"
            if self.requested
            else "SIGTERM to another rank of the gang"
        )
        self._write_message(
            "PreemptedCheckpointSaved", f"stopped and saved after step {step} ({cause})", step
        )

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self._received_at is not None:
            return
        self._received_at = time.monotonic()
        log.warning("SIGTERM: stopping after the current step; %.1fs budget to save", self.budget_s)
        threading.Thread(target=self._watchdog, name="termination-watchdog", daemon=True).start()

    def _watchdog(self) -> None:
        time.sleep(self.budget_s)
        with self._lock:
            code = self._exit_code_on_expiry
        if code == TERMINATED_WITHOUT_CHECKPOINT:
            log.error("SIGTERM budget of %.1fs ran out before a checkpoint was saved", self.budget_s)
            self._write_message(
                "TerminatedWithoutCheckpoint",
                f"no checkpoint within the {self.budget_s:.1f}s budget after SIGTERM",
                None,
            )
        logging.shutdown()
        # The main thread may be blocked in a collective whose peer is gone; only _exit ends it.
        os._exit(code)

    def _write_message(self, reason: str, message: str, step: int | None) -> None:
        path = self._message_path
        if path is None or not path.parent.is_dir():
            return
        try:
            path.write_text(json.dumps({"reason": reason, "message": message, "step": step}) + "\n")
        except OSError as err:  # read-only or missing: the exit code still tells the story
            log.warning("could not write the termination message to %s: %s", path, err)
