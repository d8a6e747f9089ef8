"""Operator chaos, the short run: 10 jobs (two of each planned life) while the operator process is
SIGKILLed 8 times at random intervals of 1-4 s. Every job ends in its planned phase with exactly its
planned attempt and restart counters, no (job, attempt, role, index) ever had two pods, and nothing is
left behind. The long run (50 jobs, 20 kills, figures) is `python -m bench.chaos`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client

from localcluster import Cluster
from tests.integration.chaos import LIVES, Chaos, PodLedger, left_behind, live, outcome
from tests.integration.conftest import Jobs


def test_jobs_live_their_planned_lives_while_the_operator_is_killed_again_and_again(
    cluster_b: Cluster,
    crd: dict[str, Any],
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    names = {f"{life}-{i}": life for i in range(2) for life in LIVES}
    chaos = Chaos(namespace, tmp_path, kills=8, seed=12)
    start = time.monotonic()
    with PodLedger(core, namespace).recording() as ledger, chaos.running():
        live(jobs, core, namespace, names, timeout=180, between=chaos.next_kill)
        wrong = outcome(jobs, names, timeout=180)
        stray = left_behind(jobs, names)
    print(f"\nchaos: {len(names)} jobs, {chaos.killed} operator kills, {time.monotonic() - start:.0f}s, "
          f"{sum(len(u) for u in ledger.uids.values())} pods created")  # fmt: skip
    assert chaos.killed >= 5, "the jobs ended before the chaos did much"
    assert wrong == {}, wrong
    assert ledger.twice() == {}, ledger.twice()
    assert stray == [], stray
