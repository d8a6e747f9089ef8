"""The start-up runs of ../shared/peers/bench_peers.py on two clocks, and the scheduler's pace.

The harness times each job from its own create call: a controller's job from the create of its custom
resource (all 100 within ~0.5 s), the floor's from the create of the job's first pod, which its 16 threads
reach only seconds into the run. This prints, per result file, the p50 of create -> all Running on that
clock and on one clock for all (from the run's first create), each over the floor's, and how far the
pods' binding follows kube-scheduler's client rate limit (QPS 50, burst 100 by default: the n-th pod can
be bound no sooner than (n - burst) / qps seconds in).

    .venv/bin/python -m bench.startup_clocks $PEERS_DIR/results/*-startup-*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

SCHEDULER_QPS, SCHEDULER_BURST = 50.0, 100  # kube-scheduler's defaults (clientConnection), which tier C keeps
GANG = 8


def clocks(result: dict[str, Any]) -> dict[str, float]:
    """p50 of create -> all Running on the job's own clock and on the run's; the p50 job's binding against
    the earliest the scheduler's rate limit allows it."""
    jobs = [row for row in result["per_job"].values() if row[3] is not None]
    own = [running for _, _, _, running in jobs]
    shared = [created + running for created, _, _, running in jobs]
    by_running = sorted(jobs, key=lambda row: row[0] + row[3])
    middle = len(by_running) // 2
    created, _, bound, _ = by_running[middle]
    earliest_bound = max(0.0, ((middle + 1) * GANG - SCHEDULER_BURST) / SCHEDULER_QPS)
    return {
        "own": statistics.median(own),
        "shared": statistics.median(shared),
        "p50_job_bound_at": created + bound,
        "scheduler_allows": earliest_bound,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", type=Path)
    args = parser.parse_args()
    rows = [(path, json.loads(path.read_text())) for path in args.results]
    floors = [clocks(result) for _, result in rows if result["contender"] == "floor"]
    if not floors:
        raise SystemExit("no floor run among the results: nothing to compare with")
    floor_own = statistics.median(f["own"] for f in floors)
    floor_shared = statistics.median(f["shared"] for f in floors)
    print(f"{'run':<52} {'own clock p50':>13} {'/floor':>7} {'one clock p50':>13} {'/floor':>7} "
          f"{'p50 job bound':>13} {'scheduler allows':>16}")  # fmt: skip
    for path, result in rows:
        c = clocks(result)
        print(f"{path.stem[:52]:<52} {c['own']:>13.2f} {c['own'] / floor_own:>7.2f} {c['shared']:>13.2f} "
              f"{c['shared'] / floor_shared:>7.2f} {c['p50_job_bound_at']:>13.2f} {c['scheduler_allows']:>16.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
