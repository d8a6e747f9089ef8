"""A fault hook for tests: the leader taken away between a pass's first write and its next, where an
operator upgrade, an OOM kill or a lost node can take it in production.

Off unless the process's environment names an action (DTJOB_FAULT_HOOK: `exit`, the process ends at once
as under SIGKILL; `stop`, it stops itself with SIGSTOP, as a paused VM; a container's init cannot stop
itself, so there the test stops it from the node). Armed, it fires once in the process's life, before the
second write of the first pass that decides to delete children of a job labelled FAULT_LABEL (it deletes
and writes the status: a pass that only carries out deletes an earlier status recorded does not count, so
each decision costs one replica, not every replica that takes over): the pass's first write has landed,
the rest of it never does (or, for `stop`, only once the process runs again).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

FAULT_ENV: Final = "DTJOB_FAULT_HOOK"
FAULT_LABEL: Final = "training.dtjob.io/fault-hook"
ACTIONS: Final = ("exit", "stop")

log = logging.getLogger(__name__)


def _take_away(action: str) -> None:
    if action == "exit":
        os._exit(137)  # no cleanup, no Lease handed over: as SIGKILL
    os.kill(os.getpid(), signal.SIGSTOP)


class FaultHook:
    def __init__(self, action: str | None = None, take_away: Callable[[str], None] = _take_away) -> None:
        if action is not None and action not in ACTIONS:
            raise ValueError(f"{FAULT_ENV}={action}: one of {', '.join(ACTIONS)}, or unset")
        self.action = action
        self._take_away = take_away
        self._fired = False
        self._pass = threading.local()  # the writes of the armed pass this thread executes

    @classmethod
    def from_env(cls) -> FaultHook:
        return cls(os.environ.get(FAULT_ENV) or None)

    @contextlib.contextmanager
    def pass_of(self, job: Mapping[str, Any], decides_deletes: bool) -> Iterator[None]:
        """The pass of `job` executed in this thread, armed when the hook is on, the pass decides to delete
        children and the job carries the label."""
        labels = job["metadata"].get("labels") or {}
        armed = self.action is not None and decides_deletes and FAULT_LABEL in labels and not self._fired
        self._pass.writes = 0 if armed else None
        try:
            yield
        finally:
            self._pass.writes = None

    def before_write(self) -> None:
        """Called by the gate before each write: fires before the armed pass's second one."""
        writes: int | None = getattr(self._pass, "writes", None)
        if writes is None or self.action is None:
            return
        self._pass.writes = writes + 1
        if writes == 1 and not self._fired:
            self._fired = True
            log.warning("fault hook: %s between a pass's first write and its next", self.action)
            self._take_away(self.action)
