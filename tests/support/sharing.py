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
from collections.abc import Iterator
from pathlib import Path
from typing import IO

LOCKS = Path(os.environ.get("DTJOB_TEST_LOCKS", "/tmp/dtjob-test-locks"))

# What tests share: the cluster, and the machine's pace (two cores: a test that measures time against the
# real step rate runs with no CPU-heavy test beside it).
CLUSTER = "cluster"
MACHINE = "machine"


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


# Taken in one order, the machine before the cluster (tests/conftest.py's cluster_lock), so that no two
# tests wait on each other.
@contextlib.contextmanager
def sharing(resource: str = CLUSTER) -> Iterator[None]:
    """A share of `resource`, beside every other sharer."""
    # The turnstile: a test waiting to own the resource holds it, so that sharers queue behind it
    # instead of starving it.
    with _flock(f"{resource}.turnstile", fcntl.LOCK_EX):
        pass
    with _flock(resource, fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def owning(resource: str = CLUSTER) -> Iterator[None]:
    """`resource` to this test alone, once every other share of it is given back."""
    with _flock(f"{resource}.turnstile", fcntl.LOCK_EX), _flock(resource, fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def one_worker_at_a_time(what: str) -> Iterator[None]:
    """`what` done by one test process at a time (building an image the others then find)."""
    with _flock(what, fcntl.LOCK_EX):
        yield
