"""One local cluster shared by the tests that run side by side (`make test`; docs/testing.md).

Tests that keep to their own namespace share the cluster and run side by side; a test marked
`cluster_wide` changes what every test sees (it takes the cluster down, restarts the apiserver, replaces
the CRD, adds or loses a real node) and runs alone: it waits for the sharers to finish, and new sharers
wait behind it. A test marked `quiet` measures time against the machine's pace: it also owns the machine,
which the CPU-heavy tests that need no cluster (tests/trainer) share. All are file locks, so they hold
across processes and vanish with a process that dies. Run one after another, every lock is taken at once.
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

# What tests share: the cluster, and the machine's pace (two cores: a test that measures time against the
# real step rate runs with no CPU-heavy test beside it).
CLUSTER = "cluster"
MACHINE = "machine"

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


def _shares() -> dict[str, int]:
    if not hasattr(_held, "shares"):
        _held.shares = {}
    shares: dict[str, int] = _held.shares
    return shares


@contextlib.contextmanager
def sharing(resource: str = CLUSTER) -> Iterator[None]:
    """Hold a share of `resource` (re-entrant within a process)."""
    shares = _shares()
    if shares.get(resource):
        shares[resource] += 1
        try:
            yield
        finally:
            shares[resource] -= 1
        return
    # The turnstile: a test waiting to own the resource holds it, so that sharers queue behind it
    # instead of starving it.
    with _flock(f"{resource}.turnstile", fcntl.LOCK_EX):
        pass
    with _flock(resource, fcntl.LOCK_SH):
        shares[resource] = 1
        try:
            yield
        finally:
            shares[resource] = 0


@contextlib.contextmanager
def owning(resource: str = CLUSTER) -> Iterator[None]:
    """`resource` to this test alone, once every other share of it is given back."""
    if _shares().get(resource):
        raise RuntimeError(f"owning the {resource} while this process shares it would wait forever")
    with _flock(f"{resource}.turnstile", fcntl.LOCK_EX), _flock(resource, fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def bringing_up() -> Iterator[None]:
    """One worker at a time brings the cluster up (or further up); the others then find it running."""
    with _flock("bring-up", fcntl.LOCK_EX):
        yield
