"""Operator chaos, the long run: N jobs (an equal share of each planned life in tests/support/chaos.py)
while the operator process is SIGKILLed K times at random intervals, on tier B. Prints the figures and
exits non-zero when a job ended off its plan, a pod was created twice, or something was left behind.

    .venv/bin/python -m bench.chaos --jobs 50 --kills 20 [--replicas 2] [--seed N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

from bench.gang_on_tier_b import new_namespace, tier_b
from tests.support.chaos import LIVES, Chaos, PodLedger, left_behind, live, outcome
from tests.support.jobs import Jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--replicas", type=int, default=1, choices=[1, 2], help="2: take the Lease holder away"
    )
    args = parser.parse_args(argv)

    cluster = tier_b()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    namespace = new_namespace(core, "chaos")
    jobs = Jobs(client.CustomObjectsApi(api), core, namespace)
    lives = list(LIVES)
    names = {f"{lives[i % len(lives)]}-{i}": lives[i % len(lives)] for i in range(args.jobs)}
    logs = Path(tempfile.mkdtemp(prefix="dtjob-chaos-"))
    # With two replicas, the leader is taken away by SIGKILL, SIGTERM and a partition in turn.
    chaos = Chaos(namespace, logs, kills=args.kills, seed=args.seed, replicas=args.replicas,
                  cluster=cluster if args.replicas > 1 else None)  # fmt: skip
    start = time.monotonic()
    try:
        with PodLedger(core, namespace).recording() as ledger, chaos.running(client.CoordinationV1Api(api)):
            # Spread the kills over the lives: the driver waits for a kill between its phases.
            per_phase = max(1, -(-args.kills // 4))  # live() has four phase boundaries: all K kills land
            live(jobs, core, namespace, names, timeout=600, between=lambda: chaos.next_kill(per_phase))
            wrong = outcome(jobs, names, timeout=600)
            stray = left_behind(jobs, names)
    finally:
        core.delete_namespace(namespace)
    twice = ledger.twice(names)
    print(
        f"jobs                     {len(names)} ({', '.join(f'{len(names) // len(lives)}x {life}' for life in lives)})"
    )
    print(
        f"operator replicas        {args.replicas}{' (the Lease holder is the one taken away)' if args.replicas > 1 else ''}"
    )
    ways = ", ".join(f"{way} {chaos.ways.count(way)}" for way in dict.fromkeys(chaos.ways))
    print(f"operators taken away     {chaos.killed} ({ways})")
    print(f"seed                     {args.seed}")
    print(f"wall time                {time.monotonic() - start:.0f} s")
    print(f"pods created             {sum(len(uids) for uids in ledger.uids.values())}")
    print(f"jobs off their plan      {len(wrong)} {wrong or ''}")
    print(f"(job, attempt, role, index) with pods beyond the plan  {len(twice)} {twice or ''}")
    print(f"pods left behind         {len(stray)} {stray or ''}")
    print(f"operator logs            {logs}")
    return 1 if wrong or twice or stray else 0


if __name__ == "__main__":
    sys.exit(main())
