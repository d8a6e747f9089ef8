"""One local cluster shared by several pytest-xdist workers (`make test` runs them; docs/testing.md).

Tests that keep to their own namespace share the cluster and run side by side; a test marked
`cluster_wide` changes what every test sees (it takes the cluster down, restarts the apiserver, cordons the
real node, replaces the CRD, adds or loses a real node) and runs alone: it waits for the sharers to finish,
and new sharers wait behind it. Both are file locks, so they hold across worker processes and vanish with a
process that dies. Without xdist every lock is taken at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

LOCKS = Path(os.environ.get("DTJOB_TEST_LOCKS", "/tmp/dtjob-test-locks"))

_held = threading.local()


@contextlib.contextmanager
def _flock(name: str, mode: int) -> Iterator[None]:
    LOCKS.mkdir(parents=True, exist_ok=True)
    handle: IO[str]
    with open(LOCKS / name, "a+") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _shares() -> int:
    return getattr(_held, "shares", 0)


@contextlib.contextmanager
def sharing_cluster() -> Iterator[None]:
    """Hold a share of the cluster (re-entrant: a module fixture's share covers its tests')."""
    if _shares():
        _held.shares += 1
        try:
            yield
        finally:
            _held.shares -= 1
        return
    # The turnstile: a cluster-wide test waiting holds it, so that sharers queue behind it instead of
    # starving it.
    with _flock("turnstile", fcntl.LOCK_EX):
        pass
    with _flock("cluster", fcntl.LOCK_SH):
        _held.shares = 1
        try:
            yield
        finally:
            _held.shares = 0


@contextlib.contextmanager
def owning_cluster() -> Iterator[None]:
    """The cluster to this test alone, once every other worker's share is given back."""
    if _shares():
        raise RuntimeError("a cluster-wide test inside a fixture that shares the cluster would wait forever")
    with _flock("turnstile", fcntl.LOCK_EX), _flock("cluster", fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def bringing_up() -> Iterator[None]:
    """One worker at a time brings the cluster up (or further up); the others then find it running."""
    with _flock("bring-up", fcntl.LOCK_EX):
        yield
