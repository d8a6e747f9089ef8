"""bench.startup_clocks: the harness's per-job clock against one clock for the whole run."""

from __future__ import annotations

from bench.startup_clocks import clocks


def test_a_job_created_late_counts_its_wait_on_one_clock_only() -> None:
    # per job: [created, exist, bound, running], the last three from the job's own create (the harness's rows)
    result = {"per_job": {
        "a": [0.0, 0.1, 0.2, 1.0],
        "b": [2.0, 0.1, 0.2, 1.0],
        "c": [4.0, 0.1, 0.2, 1.0],
        "never": [0.0, None, None, None],
    }}  # fmt: skip
    found = clocks(result)
    assert found["own"] == 1.0  # every job Running 1 s after its own create
    assert found["shared"] == 3.0  # the median job Running 3 s into the run
    assert found["p50_job_bound_at"] == 2.2
    assert found["scheduler_allows"] == 0.0  # 16 pods are within the scheduler's burst


def test_the_scheduler_allows_the_median_job_no_sooner_than_its_rate_limit() -> None:
    result = {"per_job": {f"j{k:03d}": [0.0, 0.1, 0.2, 1.0 + k] for k in range(100)}}
    # the 51st job's 8 pods are pods 401-408: (408 - 100) / 50 s at the earliest
    assert clocks(result)["scheduler_allows"] == (51 * 8 - 100) / 50
