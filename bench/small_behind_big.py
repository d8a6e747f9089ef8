"""Head-of-line blocking: a one-pod job created while big gangs start. How long until its pass has created
its pod, and until it runs, next to the same job on an idle operator.

    .venv/bin/python -m bench.small_behind_big [--big 20] [--pods 64] [--rounds 3] [--operator-src PATH]...

Tier B (brought up if needed, left up; scale- nodes added as bench.scale does, and deleted at the end).
Per --operator-src (as bench.scale; several checkouts run one after the other, each in a fresh namespace)
and per round: `--big` jobs of `--pods` one-GPU pods are created at once from 16 threads; `--after`
seconds later, while their passes create thousands of pods, one job of one pod. Then all of them are
deleted and the next round starts. The one-pod job alone on the idle operator is measured first.
Figures: seconds from the small job's create call to its pod created (its pass ran) and Running.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

from bench.gang_on_tier_b import CRD_FILE, Namespace, new_namespace, tier_b
from bench.scale import (
    CREATE_THREADS,
    Operator,
    PodWatch,
    add_capacity,
    delete_capacity,
    delete_namespace,
    job_manifest,
    note,
    summary,
)
from dtjob.settings import DEFAULT_API_BURST, DEFAULT_API_QPS

REPO = Path(__file__).resolve().parent.parent
SMALL = "small"


def _small_job(name: str) -> dict[str, Any]:
    job = job_manifest(name, 2)
    job["spec"]["replicas"] = [r for r in job["spec"]["replicas"] if r["role"] == "Master"]
    return job


def one_small_job(namespace: Namespace, watch: PodWatch, name: str, timeout: float) -> tuple[float, float]:
    """Create the one-pod job; seconds to its pod created and to it Running."""
    start = time.monotonic()
    namespace.create_job(_small_job(name))
    if not watch.wait(lambda: name in watch.all_running, timeout, lambda: None):
        raise RuntimeError(f"{name} did not run within {timeout:.0f}s")
    with watch.cond:
        return watch.all_created[name] - start, watch.all_running[name] - start


def _delete_jobs(namespace: Namespace, watch: PodWatch, timeout: float) -> None:
    """Delete every job while the operator runs, and wait until their pods are gone."""
    namespace.delete_jobs(timeout)
    if not watch.wait(lambda: all(pod["gone"] for pod in watch.pods.values()), timeout, lambda: None):
        raise RuntimeError("the jobs' pods were not all gone")


def measure(api: client.ApiClient, cluster: Any, src: Path, args: argparse.Namespace) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    namespace = Namespace(core, client.CustomObjectsApi(api), new_namespace(core, "bench-hol"))
    # gang 1: a job's "all created" is its first pod (what the small job has); the big ones are not timed
    watch = PodWatch(api, namespace.name, 1).start_and_wait()
    operator = Operator(src, namespace.name, cluster.kubeconfig, args.qps, args.burst)
    alone: list[tuple[float, float]] = []
    behind: list[tuple[float, float]] = []
    try:
        operator.start()
        time.sleep(2)  # its watches start
        for round_ in range(args.rounds):
            alone.append(one_small_job(namespace, watch, f"{SMALL}-alone-{round_}", 60))
            _delete_jobs(namespace, watch, 300)
            big = [f"big-{round_}-{i:02d}" for i in range(args.big)]
            with ThreadPoolExecutor(CREATE_THREADS) as pool:
                list(pool.map(lambda name: namespace.create_job(job_manifest(name, args.pods)), big))
            time.sleep(args.after)  # the big gangs' passes are under way
            behind.append(one_small_job(namespace, watch, f"{SMALL}-behind-{round_}", 600))
            note(
                f"round {round_}: alone {alone[-1][0]:.3f}s, behind {args.big} big gangs {behind[-1][0]:.3f}s"
            )
            _delete_jobs(namespace, watch, 600)
            if not operator.alive():
                raise RuntimeError(f"the operator died:\n{operator.log_tail()}")
    finally:
        operator.stop()
        watch.stop()
        delete_namespace(core, namespace.name)
    return {
        "operator_src": str(src),
        "alone_to_pod_created": summary(a for a, _ in alone),
        "alone_to_running": summary(r for _, r in alone),
        "behind_to_pod_created": summary(a for a, _ in behind),
        "behind_to_running": summary(r for _, r in behind),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--big", type=int, default=20, help="big gangs created at once")
    parser.add_argument("--pods", type=int, default=64, help="pods in each big gang")
    parser.add_argument(
        "--after", type=float, default=1.0, help="seconds from the big gangs to the small job"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--operator-src", type=Path, action="append", help="a checkout's operator/ (repeatable)"
    )
    parser.add_argument("--qps", type=float, default=DEFAULT_API_QPS)
    parser.add_argument("--burst", type=int, default=DEFAULT_API_BURST)
    parser.add_argument("--keep-nodes", action="store_true", help="leave the scale- nodes for the next run")
    args = parser.parse_args()
    cluster = tier_b(str(REPO / CRD_FILE))
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = 2 * CREATE_THREADS
    api = client.ApiClient(cfg)
    results = []
    try:
        add_capacity(cluster, client.CoreV1Api(api), args.big * args.pods + 1)
        for src in [p.resolve() for p in args.operator_src or [REPO / "operator"]]:
            results.append(measure(api, cluster, src, args))
    finally:
        if not args.keep_nodes:
            delete_capacity(cluster)
    show: Callable[[dict[str, float]], str] = lambda s: f"p50 {s['p50']:.3f}  max {s['max']:.3f}"  # noqa: E731
    for result in results:
        print(f"== {result['operator_src']}: a one-pod job, seconds from its create call to")
        print(f"its pod created, alone               {show(result['alone_to_pod_created'])}")
        print(
            f"its pod created, behind {args.big} x {args.pods} pods  {show(result['behind_to_pod_created'])}"
        )
        print(f"it Running, behind them               {show(result['behind_to_running'])}")
    print("RESULT " + json.dumps({"big": args.big, "pods": args.pods, "operators": results}), flush=True)


if __name__ == "__main__":
    main()
