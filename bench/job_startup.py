"""How long a new job takes to get its gang: from the create call to every pod created, and to every pod
Running, for a PyTorch job of N workers on fake GKE GPU nodes.

    .venv/bin/python -m bench.job_startup [--workers 8] [--repeats 10]

Tier B (brought up if needed, left up), the operator in-process watching a namespace of its own. kwok
starts a pod in milliseconds, so the figures are the operator's and the control plane's share: on GKE,
add scheduling onto real nodes, the image pull and the trainer's start-up.
"""

from __future__ import annotations

import argparse
import time

from bench.gang_on_tier_b import Gang, Namespace, describe, operator_namespace, wait
from tests.support.jobs import pytorch_job

MILESTONES = ("all pods created", "all pods Running")


def one_job(gang: Gang, namespace: Namespace, workers: int) -> list[float]:
    """Create the job; seconds from the create call to each milestone. Deleted afterwards, so each job
    meets the same quiet control plane."""
    start = time.monotonic()
    namespace.create_job(pytorch_job(gang.name, workers=workers))
    points = [
        wait(lambda: len(gang.pods()) == workers, "all pods created"),
        wait(lambda: gang.running(1, workers), "all pods Running"),
    ]
    namespace.delete_jobs()
    return [point - start for point in points]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    with operator_namespace("bench-startup") as namespace:
        rounds = [
            one_job(Gang(namespace, f"startup-{index}"), namespace, args.workers)
            for index in range(args.repeats)
        ]

    print(f"\n== seconds from creating a {args.workers}-worker job to: ({args.repeats} jobs, tier B)")
    for index, milestone in enumerate(MILESTONES):
        print(f"{milestone:18s} {describe([r[index] for r in rounds])}")


if __name__ == "__main__":
    main()
