"""One local cluster shared by the tests that run side by side (`make test`; docs/testing.md).

Tests that keep to their own namespace share the cluster and run side by side; a test marked
`cluster_wide` changes what every test sees (it takes the cluster down, restarts the apiserver, replaces
the CRD, adds or loses a real node) and runs alone: it waits for the sharers to finish, and new sharers
wait behind it. A test marked `quiet` measures time against the machine's pace: it also owns the machine,
which the CPU-heavy tests that need no cluster (tests/trainer) share. A test that trains (tests/trainer,
tests/e2e) also takes one of a few training slots, so that more workers than slots run the tests that
mostly wait beside the trainings without more trainings at once. All are file locks, so they hold across
processes and vanish with a process that dies. Run one after another, every lock is taken at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

LOCKS = Path(os.environ.get("DTJOB_TEST_LOCKS", "/tmp/dtjob-test-locks"))

# What tests share: the cluster, and the machine's pace (two cores: a test that measures time against the
# real step rate runs with no CPU-heavy test beside it).
CLUSTER = "cluster"
MACHINE = "machine"
# The trainings that run at once in the shared part (`make test` sets it; none limits a plain run).
TRAININGS = "trainings"
TRAINING_SLOTS_ENV = "DTJOB_TEST_TRAINING_SLOTS"


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


@contextlib.contextmanager
def a_slot(resource: str, slots: int) -> Iterator[None]:
    """One of `slots` places of `resource`: the first free one, else the first to be given back."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    handles = [open(LOCKS / f"{resource}.{slot}", "a+") for slot in range(slots)]  # noqa: SIM115
    try:
        held = None
        while held is None:
            held = next((h for h in handles if _try_flock(h)), None)
            if held is None:
                # A holder gives its slot back when its test ends (or its process dies): a poll, since
                # flock cannot wait for the first of several locks.
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    finally:
        for handle in handles:
            handle.close()


def _try_flock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


# The tests that train end within the first part of the order, so that the ones that mostly wait fill the
# workers the training slots leave, and none of the long trainings starts last.
TRAININGS_SPREAD = 0.8


def interleaved(items: list[T], trains: Callable[[T], bool], spread: float = TRAININGS_SPREAD) -> list[T]:
    """The items that train spread evenly over the first `spread` of the order, the others over all of it,
    each kind in its own order: beside the trainings (CPU-bound) the workers the slots leave run tests
    that wait on the operator and the apiserver, instead of those all running last at a fraction of the
    machine (2026-12-07: 30-60 % of the two cores over the suite's last 300 s)."""
    training = [item for item in items if trains(item)]
    waiting = [item for item in items if not trains(item)]
    placed = [(index / len(training) * spread, 0, item) for index, item in enumerate(training)]
    placed += [(index / len(waiting), 1, item) for index, item in enumerate(waiting)]
    return [item for _, _, item in sorted(placed, key=lambda entry: entry[:2])]
