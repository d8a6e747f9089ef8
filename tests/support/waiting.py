"""Polling with a deadline: the only way tests wait (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tests.support.pace import liveness_timeout

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.2,
    hopeless: Callable[[], str | None] = lambda: None,
    timing: bool = False,
    state: Callable[[], object] | None = None,
) -> T:
    """Call `probe` until it returns a truthy value (returned) or raises nothing and time runs out.

    `hopeless` says why waiting on is pointless (a process it waits on has exited), failing at once.
    The timeout is a liveness wait's, scaled by the run's pace (tests/support/pace.py); with `timing`
    it is a claim about time (a takeover within seconds) and holds as given. `state` says, when time runs
    out, what there was instead (a probe's falsy value rarely does).
    """
    if not timing:
        timeout = liveness_timeout(timeout)
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except Exception as err:  # the thing is not there yet (404, connection refused, ...)
            last_error = err
        if reason := hopeless():
            raise AssertionError(f"gave up waiting for {what}: {reason}")
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            if state is not None:
                detail += f" (state then: {_state(state)})"
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def _state(state: Callable[[], object]) -> str:
    try:
        return str(state())
    except Exception as err:  # a failing description must not hide the timeout it describes
        return f"could not be read: {err!r}"
