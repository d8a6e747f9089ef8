"""CPU cost of one reconcile pass (the pure core, no API calls), for changes to the reconcile path.

Times the core's `reconcile` on the passes a fleet runs most: a steady 8-pod gang (every pod Running, nothing
to do) and a queued job waiting for Kueue's quota; where the tree has progress reports, the same gang
with every pod reporting (with its own step time, where the tree judges slow ranks) and hang detection on, and the operator's own work for one report (parsing it
and filing it in the job's ledger; the HTTP server's part is not in it). Compare two trees in one run,
alternating (each tree is a checkout's operator/: that checkout's own bench and tests/support measure it, as they
follow its API):

    git worktree add /tmp/before <commit>
    python -m bench.pass_cost --operator-src /tmp/before/operator --operator-src operator
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def measure(passes: int) -> dict[str, float]:
    """Microseconds a pass (median of 5 rounds), in this interpreter's `dtjob`."""
    from tests.support.builders import NOW, SHARED_CHECKPOINTS, manifest
    from tests.support.kueue import QUEUED, workload
    from tests.support.plan import plan_for as reconcile

    job = manifest(("Worker", 8), checkpoint=SHARED_CHECKPOINTS)
    steady_job, pods = _steady(reconcile, job)
    in_place = manifest(
        ("Worker", 8), checkpoint=SHARED_CHECKPOINTS, runPolicy={"restartStrategy": "InPlace"}
    )
    in_place_job, in_place_pods = _steady(reconcile, in_place)
    queued_first = reconcile(QUEUED, [], NOW)
    queued_job = {**QUEUED, "status": queued_first.status}
    waiting = workload(("QuotaReserved", "False"))
    extra = {"routes": {"team-a-gpus": "h100-pool"}}
    later = NOW + timedelta(seconds=1)
    cases = {
        "steady 8-pod gang": lambda: reconcile(steady_job, pods, later),
        # Every pass renders each live member and compares its labels and annotations (plan._drifted).
        "steady 8-pod gang, restartStrategy InPlace": lambda: reconcile(in_place_job, in_place_pods, later),
        "queued, waiting for quota": lambda: reconcile(queued_job, [], later, workload=waiting, **extra),
    }
    cases.update(_progress_cases(job, pods, later))
    figures = {}
    for name, run in cases.items():
        rounds = []
        for _ in range(5):
            start = time.process_time()
            for _ in range(passes):
                run()
            rounds.append((time.process_time() - start) / passes * 1e6)
        figures[name] = statistics.median(rounds)
    return figures


def _steady(
    reconcile: Callable[..., Any], job: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The job after its first passes, with its pods all Running."""
    from tests.support.builders import NOW, pods_of, running

    first = reconcile(job, [], NOW)
    steady = {**job, "status": first.status}
    pods = [running(p) for p in pods_of(job).values()]
    settled = reconcile(steady, pods, NOW)
    steady = {**steady, "status": settled.status or steady["status"]}
    plan = reconcile(steady, pods, NOW + timedelta(seconds=1))
    assert not (plan.create or plan.delete or plan.relabel or plan.status), f"not steady: {plan}"
    return steady, pods


def _progress_cases(
    job: dict[str, Any], pods: list[dict[str, Any]], now: datetime
) -> dict[str, Callable[[], object]]:
    from dtjob.core.progress import Ledger, Report, received
    from tests.support.plan import plan_for as reconcile

    watched = {**job, "spec": {**job["spec"], "runPolicy": {"progressDeadlineSeconds": 300}}}
    ledger: Ledger | None = None
    names = [pod["metadata"]["name"] for pod in pods]
    own = {"own_step_seconds": 0.3}  # every pod reports its own step time too (slow ranks are judged)
    for name in names:
        ledger = received(ledger, 1, name, Report(step=100, total_steps=1000, step_seconds=0.5, **own), now)
    first = reconcile({**watched, "status": job.get("status")}, pods, now, ledger=ledger)
    reporting = {**watched, "status": first.status or job.get("status")}
    body = b'{"step": 101, "totalSteps": 1000, "epoch": 1, "loss": 0.25, "samplesPerSecond": 800.5, "stepSeconds": 0.5}'

    def one_report() -> object:
        return received(ledger, 1, names[3], Report.model_validate_json(body), now)

    return {
        "steady 8-pod gang, all reporting, hang detection on": lambda: reconcile(
            reporting, pods, now, ledger=ledger
        ),
        "one progress report filed (8-pod ledger)": one_report,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the trees")
    parser.add_argument("--operator-src", action="append", default=[], help="a tree's operator/ (repeat)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.passes)))
        return
    trees = args.operator_src or [str(REPO / "operator")]
    results: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    for _ in range(args.rounds):
        for tree in trees:
            # Each tree is measured by its own checkout's bench and tests/support (they follow its API).
            root = Path(tree).resolve().parent
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, str(root)])}
            out = subprocess.run([sys.executable, "-m", "bench.pass_cost", "--child", "--passes", str(args.passes)],
                                 cwd=root, env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
            results[tree].append(json.loads(out))
    base = trees[0]
    for tree in trees:
        for case in results[tree][0]:
            values = [r[case] for r in results[tree]]
            against = ""
            if case in results[base][0]:  # a case the first tree has too
                ratio = statistics.median(values) / statistics.median(r[case] for r in results[base])
                against = f" (x{ratio:.2f} of the first tree)"
            print(f"{tree}: {case}: {', '.join(f'{v:.0f}' for v in values)} us/pass{against}")


if __name__ == "__main__":
    main()
