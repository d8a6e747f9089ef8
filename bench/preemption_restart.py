"""How long a gang is down after a spot preemption: from the preemption to the whole new gang Running.

    .venv/bin/python -m bench.preemption_restart [--workers 4] [--repeats 20]

Tier B (brought up if needed, left up): the operator runs in-process, watching a namespace of its own;
kwok plays the kubelet of fake GKE GPU nodes and marks a pod the way GKE spot preemption leaves it. Each
round preempts one worker of a Running gang and times four points, from the moment the preemption
shows on the pod: the operator recorded the restart (status.attempt), the old gang is gone, every pod
of the new attempt exists, every one is Running. Polling every 20 ms bounds each reading's error.
kwok starts a pod in milliseconds, so the figure is the operator's share of the downtime: on GKE, add
the pods' scheduling, image pull and trainer start-up.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.gang_on_tier_b import Gang, describe, operator_namespace, wait
from localcluster import sim
from tests.support.jobs import pytorch_job

MILESTONES = ("restart recorded", "old gang gone", "new pods created", "new gang Running")


def job_manifest(name: str, workers: int, repeats: int) -> dict[str, Any]:
    job = pytorch_job(name, workers=workers, runPolicy={"maxPreemptions": repeats + 1})
    for replica in job["spec"]["replicas"]:
        replica["template"]["spec"]["terminationGracePeriodSeconds"] = 1  # as a kubelet would take: kwok's
    return job


def one_round(gang: Gang, attempt: int, workers: int) -> list[float]:
    """Preempt a worker of a Running gang of `attempt`; seconds from the preemption to each milestone."""
    pod = f"{gang.name}-worker-{attempt % workers}"
    sim.preempt_pod(gang.core, gang.namespace, pod)
    start = wait(lambda: gang.preempted(pod) or gang.attempt() > attempt, f"preemption of {pod}")
    points = [
        wait(lambda: gang.attempt() == attempt + 1, "restart in the status"),
        wait(lambda: not gang.of_attempt(attempt), "old gang gone"),
        wait(lambda: len(gang.of_attempt(attempt + 1)) == workers, "new pods"),
        wait(lambda: gang.running(attempt + 1, workers), "new gang Running"),
    ]
    return [point - start for point in points]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    with operator_namespace("bench-preemption") as namespace:
        namespace.create_job(job_manifest("bench", args.workers, args.repeats))
        gang = Gang(namespace, "bench")
        wait(lambda: gang.running(1, args.workers), "first gang Running")
        rounds = [one_round(gang, attempt, args.workers) for attempt in range(1, args.repeats + 1)]

    print(f"\n== seconds from a spot preemption to: ({args.workers} workers, {args.repeats} rounds, tier B)")
    for index, milestone in enumerate(MILESTONES):
        print(f"{milestone:18s} {describe([r[index] for r in rounds])}")
    print("rounds, to Running:", " ".join(f"{r[-1]:.3f}" for r in rounds))


if __name__ == "__main__":
    main()
