"""The machine's pace, for the suite's liveness waits (docs/testing.md#two-kinds-of-deadline).

A liveness wait (an outcome that comes eventually: a pod Running, a job Succeeded) takes as long as the
machine lets it: on a slower or busier machine than the one a timeout was chosen on, the same correct
test times out. `make test` measures the machine once at its start (`measure`) and passes the factor to
every test process (DTJOB_TEST_PACE), with the run's budget (DTJOB_RUN_DEADLINE, seconds since the
epoch): `wait_for` scales its timeout by the pace, never past the budget. A timing claim (an ETA within
20 %, a takeover within seconds) is never scaled: it asserts elapsed times itself, or calls `wait_for`
with `timing=True`.
"""

from __future__ import annotations

import os
import time

PACE_ENV = "DTJOB_TEST_PACE"
DEADLINE_ENV = "DTJOB_RUN_DEADLINE"

# The probe's best time on the machine the suite's timeouts were chosen on (2 cores, idle; 2026-12-02).
REFERENCE_PROBE_SECONDS = 0.14
# `make test` runs three shared workers and the alone part beside the cluster on two cores: each test
# gets about half the CPU it had when its timeouts were chosen (run alone, one after another).
SUITE_LOAD = 2.0
# Past this a machine is too slow for the suite's budget anyway: the waits stop growing.
MAX_MACHINE_FACTOR = 3.0


def probe_seconds(rounds: int = 3) -> float:
    """The best of `rounds` runs of a fixed CPU-bound workload (pure Python: the interpreter's pace,
    which the operator, the test processes and the local gangs all run at)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - started)
    return best


def pace_of(probe: float, load: float = SUITE_LOAD) -> float:
    """The factor liveness waits scale by: the machine against the reference, times the suite's load."""
    machine = min(max(probe / REFERENCE_PROBE_SECONDS, 1.0), MAX_MACHINE_FACTOR)
    return round(machine * load, 2)


def liveness_timeout(timeout: float, pace: float | None = None, now: float | None = None) -> float:
    """`timeout` scaled by the run's pace, capped by what is left of the run's budget (never below the
    unscaled timeout: a test past the budget fails as it did before, not at once)."""
    pace = float(os.environ.get(PACE_ENV, "1")) if pace is None else pace
    scaled = timeout * max(pace, 1.0)
    if deadline := os.environ.get(DEADLINE_ENV):
        left = float(deadline) - (time.time() if now is None else now)
        scaled = min(scaled, left)
    return max(scaled, timeout)
