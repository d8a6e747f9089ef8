"""Hot spares under two operator replicas: a member is preempted, and the leader is killed mid-takeover,
once some of the next attempt's relabels have landed and not all (its writes go out one every half
second here). The standby takes over and finishes the takeover: in every attempt each rank is
held by exactly one pod, the lost rank by a spare (no pod is created for it), the counters are exact, and
the spares are made up again. A pod ledger (a watch that fails the test if it dies) is the witness."""

from __future__ import annotations

import contextlib
import functools
import signal
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from dtjob.core.names import ATTEMPT_LABEL, ATTEMPT_RESYNC_ANNOTATION, RANK_LABEL, SPARE_LABEL, named_as_spare
from localcluster import Cluster, sim
from tests.support.chaos import PodLedger
from tests.support.jobs import Jobs, pytorch_job
from tests.support.leader_election import TAKEOVER_SECONDS, holder, replicas
from tests.support.waiting import wait_for

WORKERS = 4
SPARES = 2
# A rank, then rank 0: the rendezvous host moves to the spare that takes it.
LOST_RANKS = ("1", "0")
ROUNDS = len(LOST_RANKS)
# Each write of the leader waits its turn: the takeover pass's writes spread over seconds.
SLOW = {"DTJOB_API_QPS": "2", "DTJOB_API_BURST": "1"}


def spare_job(name: str) -> dict[str, Any]:
    job = pytorch_job(
        name, workers=WORKERS, torch={"nprocPerNode": 1}, runPolicy={"restartStrategy": "InPlace"}
    )
    job["spec"]["replicas"][0]["spares"] = SPARES
    return job


def whole(jobs: Jobs, name: str, attempt: int) -> dict[str, client.V1Pod] | None:
    """The pods of `attempt` by rank once every rank has exactly one, all running, and the spares are
    made up; None until then."""
    pods = jobs.pods(name)
    members = [p for p in pods if (p.metadata.labels or {}).get(ATTEMPT_LABEL) == str(attempt)]
    spares = [p for p in pods if (p.metadata.labels or {}).get(SPARE_LABEL) == "true"]
    ranks = sorted(p.metadata.labels[RANK_LABEL] for p in members)
    running = all(p.status.phase == "Running" for p in (*members, *spares))
    if ranks != [str(r) for r in range(WORKERS)] or len(spares) != SPARES or not running:
        return None
    return {p.metadata.labels[RANK_LABEL]: p for p in members}


def resynced(jobs: Jobs, name: str, attempt: int) -> bool:
    """Whether every member of `attempt` carries it in its resync annotation too."""
    members = [p for p in jobs.pods(name) if (p.metadata.labels or {}).get(ATTEMPT_LABEL) == str(attempt)]
    return len(members) == WORKERS and all(
        (p.metadata.annotations or {}).get(ATTEMPT_RESYNC_ANNOTATION) == str(attempt) for p in members
    )


def test_spares_take_lost_ranks_while_the_leader_is_killed_mid_takeover(
    cluster_b: Cluster,
    crd: dict[str, Any],
    namespace: str,
    jobs: Jobs,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    leases = client.CoordinationV1Api(api_client)
    name = "spares"
    identities = (f"op-{i}" for i in range(100))
    with contextlib.ExitStack() as stack:
        ledger = stack.enter_context(PodLedger(core, namespace).recording())
        running = stack.enter_context(
            replicas(namespace, tmp_path, next(identities), next(identities), **SLOW)
        )

        def logs() -> str:
            return "".join(f"\n--- {r.identity} ---\n{r.log()[-2500:]}" for r in running.values())

        def mid_takeover(attempt: int) -> bool:
            """The restart recorded, and some but not all of its relabels landed."""
            moved = [
                p for p in jobs.pods(name) if (p.metadata.labels or {}).get(ATTEMPT_LABEL) == str(attempt)
            ]
            return 0 < len(moved) < WORKERS

        jobs.create(spare_job(name))
        gang = wait_for(
            lambda: whole(jobs, name, 1), f"attempt 1 and its spares running{logs()}", timeout=120
        )
        for attempt, lost_rank in enumerate(LOST_RANKS, start=2):
            lost = str(gang[lost_rank].metadata.name)
            leader = running[wait_for(lambda: holder(leases, namespace), "a leader", timeout=60)]
            sim.preempt_pod(core, namespace, lost)
            wait_for(functools.partial(mid_takeover, attempt), f"attempt {attempt}'s takeover under way{logs()}",
                     timeout=30, interval=0.02)  # fmt: skip
            leader.process.send_signal(signal.SIGKILL)
            leader.process.wait()
            killed = time.monotonic()
            # As a Deployment brings a killed replica back, under a new name.
            running |= stack.enter_context(replicas(namespace, tmp_path, next(identities), **SLOW))
            gang = wait_for(functools.partial(whole, jobs, name, attempt), f"attempt {attempt} whole{logs()}",
                            timeout=TAKEOVER_SECONDS + 60)  # fmt: skip
            print(f"\nattempt {attempt}: rank {lost_rank} lost; whole again "
                  f"{time.monotonic() - killed:.1f}s after the leader was killed")  # fmt: skip
            taker = str(gang[lost_rank].metadata.name)
            assert named_as_spare(taker), f"rank {lost_rank} went to {taker}, not to a spare{logs()}"
            twice = {key: uids for key, uids in ledger.seen().items() if len(uids) > 1}
            assert twice == {}, f"a member of an attempt had more than one pod: {twice}"
            # The new leader, too, writes every moved member's attempt a second time (the kubelet's
            # resync of its attempt files: names.ATTEMPT_RESYNC_ANNOTATION).
            wait_for(functools.partial(resynced, jobs, name, attempt), f"attempt {attempt} resynced{logs()}",
                     timeout=30)  # fmt: skip
        status = jobs.get(name)["status"]
        assert status["attempt"] == ROUNDS + 1
        assert status["restarts"] == {"failures": 0, "preemptions": ROUNDS, "total": ROUNDS}, status
        # Every (attempt, rank) had one pod, ever, and the ledger saw every attempt.
        seen = ledger.seen()
        assert {key[1] for key in seen} == {str(a) for a in range(1, ROUNDS + 2)}, seen
        assert all(len(uids) == 1 for uids in seen.values()), seen
