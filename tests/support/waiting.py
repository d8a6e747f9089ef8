"""Polling with a deadline: the only way tests wait (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tests.support.pace import liveness_timeout

T = TypeVar("T")

# What every wait also watches while it is listed (something the test runs beside it, such as the
# in-process operator): once it says it has stopped, no wait of the test can end well, and each fails at
# once saying so, instead of at its deadline with nothing about the cause.
_watched: list[Callable[[], str | None]] = []

# When the running test's own timeout (pytest-timeout's, less a margin for its teardown) runs out, on
# time.monotonic()'s clock: set by tests/conftest.py. A liveness wait scaled past it would be cut by
# pytest-timeout with a stack and nothing of what it waited for; it ends here instead, saying what there was.
_test_ends_at: list[float] = []


@contextmanager
def waits_ending_within(seconds: float) -> Iterator[None]:
    """Every wait_for inside the block ends, at the latest, `seconds` from now."""
    _test_ends_at.append(time.monotonic() + seconds)
    try:
        yield
    finally:
        _test_ends_at.pop()


@contextmanager
def watching(stopped: Callable[[], str | None]) -> Iterator[None]:
    """Every wait_for inside the block fails at once when `stopped` says why (it returns None while the
    thing it watches runs)."""
    _watched.append(stopped)
    try:
        yield
    finally:
        _watched.remove(stopped)


def _hopeless_beside(hopeless: Callable[[], str | None]) -> str | None:
    return hopeless() or next((reason for stopped in _watched if (reason := stopped())), None)


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
    cut = ""
    if _test_ends_at and _test_ends_at[-1] < deadline:
        deadline, timeout = _test_ends_at[-1], max(_test_ends_at[-1] - time.monotonic(), 0)
        cut = ", cut short by the test's own timeout"
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except Exception as err:  # the thing is not there yet (404, connection refused, ...)
            last_error = err
        if reason := _hopeless_beside(hopeless):
            raise AssertionError(f"gave up waiting for {what}: {reason}")
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            if state is not None:
                detail += f" (state then: {_state(state)})"
            raise AssertionError(f"timed out after {timeout:.0f}s{cut} waiting for {what}{detail}")
        time.sleep(interval)


def _state(state: Callable[[], object]) -> str:
    try:
        return str(state())
    except Exception as err:  # a failing description must not hide the timeout it describes
        return f"could not be read: {err!r}"
