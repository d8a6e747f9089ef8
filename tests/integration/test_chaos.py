"""Operator chaos, the short run: 14 jobs (two of each planned life: an elastic gang's and one cleaned up
under cleanPodPolicy All among them) while the operator process is SIGKILLed 8 times at random intervals
of 1-4 s; then with two replicas under leader election, the one that holds the Lease is taken away 6
times, by SIGKILL, by SIGTERM (a graceful shutdown) and by a partition in turn (a replacement comes back
under a new name, as a Deployment's would; a partitioned leader comes back as the standby). A new random
seed each run, printed (DTJOB_CHAOS_SEED runs a storm again). Every job ends in its planned phase with
exactly its planned attempt and restart counters (an elastic job's replacements among them), no (job,
attempt, role, index) ever had more pods than planned (one; the elastic gang's replaced member one more),
and nothing is left behind. The long run (figures) is `python -m bench.chaos`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster import Cluster
from tests.support.chaos import LIVES, WAYS, Chaos, PodLedger, left_behind, live, outcome, seed_of_this_run
from tests.support.jobs import Jobs


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
    # The leader's standby takes over only once the Lease runs out (about 12 s, but for a graceful stop):
    # fewer kills for two, each way of taking a leader away twice.
    seed = seed_of_this_run()
    print(f"\nchaos seed {seed} (DTJOB_CHAOS_SEED={seed} runs this storm again)")
    chaos = Chaos(namespace, tmp_path, kills=8 if replicas == 1 else 6, seed=seed, replicas=replicas,
                  cluster=cluster_b if replicas > 1 else None)  # fmt: skip
    start = time.monotonic()
    leases = client.CoordinationV1Api(api_client)
    with PodLedger(core, namespace).recording() as ledger, chaos.running(leases):
        live(jobs, core, namespace, names, timeout=180, between=chaos.next_kill)
        wrong = outcome(jobs, names, timeout=180)
        stray = left_behind(jobs, names)
    print(f"\nchaos: {len(names)} jobs, {replicas} replica(s), {chaos.killed} operator kills, "
          f"{time.monotonic() - start:.0f}s, {sum(len(u) for u in ledger.uids.values())} pods created")  # fmt: skip
    assert chaos.killed >= 4, "the jobs ended before the chaos did much"  # one kill between phases at least
    if replicas > 1:
        assert set(chaos.ways) == set(WAYS), f"the leader was taken away only by {chaos.ways}"
    assert wrong == {}, (seed, wrong)
    assert ledger.twice(names) == {}, ledger.twice(names)
    # The ledger saw every job's pods: one that stopped early would make the check above prove nothing.
    assert {job for job, *_ in ledger.uids} == set(names), sorted(
        set(names) - {job for job, *_ in ledger.uids}
    )
    assert stray == [], stray
