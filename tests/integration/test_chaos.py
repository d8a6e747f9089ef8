"""Operator chaos, the short run: 10 jobs (two of each planned life) while the operator process is
SIGKILLed 8 times at random intervals of 1-4 s; then with two replicas under leader election, the one
that holds the Lease, 5 times (its replacement comes back under a new name, as a Deployment's would). Every job ends in its planned phase with exactly its planned attempt and restart
counters, no (job, attempt, role, index) ever had two pods, and nothing is left behind. The long run
(50 jobs, 20 kills, figures) is `python -m bench.chaos`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster import Cluster
from tests.integration.chaos import LIVES, Chaos, PodLedger, left_behind, live, outcome
from tests.integration.conftest import Jobs


@pytest.mark.parametrize("replicas", [1, 2], ids=["one operator killed", "the leader of two killed"])
def test_jobs_live_their_planned_lives_while_the_operator_is_killed_again_and_again(
    cluster_b: Cluster,
    crd: dict[str, Any],
    jobs: Jobs,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    replicas: int,
) -> None:
    names = {f"{life}-{i}": life for i in range(2) for life in LIVES}
    # The leader's standby takes over only once the Lease runs out (about 12 s): fewer kills for two.
    chaos = Chaos(namespace, tmp_path, kills=8 if replicas == 1 else 5, seed=12, replicas=replicas)
    start = time.monotonic()
    leases = client.CoordinationV1Api(api_client)
    with PodLedger(core, namespace).recording() as ledger, chaos.running(leases):
        live(jobs, core, namespace, names, timeout=180, between=chaos.next_kill)
        wrong = outcome(jobs, names, timeout=180)
        stray = left_behind(jobs, names)
    print(f"\nchaos: {len(names)} jobs, {replicas} replica(s), {chaos.killed} operator kills, "
          f"{time.monotonic() - start:.0f}s, {sum(len(u) for u in ledger.uids.values())} pods created")  # fmt: skip
    assert chaos.killed >= 4, "the jobs ended before the chaos did much"  # one kill between phases at least
    assert wrong == {}, wrong
    assert ledger.twice() == {}, ledger.twice()
    # The ledger saw every job's pods: one that stopped early would make the check above prove nothing.
    assert {job for job, *_ in ledger.uids} == set(names), sorted(
        set(names) - {job for job, *_ in ledger.uids}
    )
    assert stray == [], stray
