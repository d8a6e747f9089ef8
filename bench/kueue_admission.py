"""Admission through Kueue, measured: jobs created at once, seconds to all their pods Running, with a
LocalQueue (Kueue admits each gang, then the operator creates it) and without; then the idle cost of an
operator with `--idle-jobs` Running jobs, both ways.

    .venv/bin/python -m bench.kueue_admission [--jobs 50] [--workers 8] [--idle-jobs 100] [--window 30]

Tier B with the Kueue addon (brought up if needed, left up; scale- nodes added as bench.scale does and
deleted at the end). Each way gets a fresh namespace and a fresh operator from this checkout: "kueue"
reads Kueue's API and its jobs name a LocalQueue onto a ClusterQueue with room for every job (so quota
never holds a job back: the figures are the admission path's own cost); "direct" runs with
DTJOB_KUEUE=false and unqueued jobs, as an operator on a cluster without Kueue. The idle window counts
the operator's and Kueue's CPU and every apiserver request.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

from bench.gang_on_tier_b import CRD_FILE, Namespace, new_namespace, tier_b
from bench.scale import (
    CREATE_THREADS,
    Operator,
    PodWatch,
    Window,
    add_capacity,
    delete_capacity,
    delete_namespace,
    job_manifest,
    note,
    summary,
)
from dtjob.settings import DEFAULT_API_BURST, DEFAULT_API_QPS
from localcluster import Cluster

REPO = Path(__file__).resolve().parent.parent
KUEUE = "kueue.x-k8s.io"
QUEUE = "bench"


def queue_up(objects: client.CustomObjectsApi, namespace: str, gpus: int) -> str:
    """A flavor, a ClusterQueue with `gpus` for this namespace alone, and its LocalQueue."""
    cluster_queue = f"cq-{namespace}"
    bodies = [
        ("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": "bench-h100"},
                             "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}}),
        ("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": cluster_queue}, "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "bench-h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}}),
    ]  # fmt: skip
    for plural, body in bodies:
        try:
            objects.create_cluster_custom_object(
                KUEUE, "v1beta1", plural, {"apiVersion": f"{KUEUE}/v1beta1", **body}
            )
        except client.ApiException as err:
            if err.status != 409:
                raise
    local = {"apiVersion": f"{KUEUE}/v1beta1", "kind": "LocalQueue", "metadata": {"name": QUEUE},
             "spec": {"clusterQueue": cluster_queue}}  # fmt: skip
    objects.create_namespaced_custom_object(KUEUE, "v1beta1", namespace, "localqueues", local)
    return cluster_queue


def manifest(name: str, workers: int, queued: bool) -> dict[str, Any]:
    job = job_manifest(name, workers)
    if queued:
        job["metadata"]["labels"] = {f"{KUEUE}/queue-name": QUEUE}
    return job


def start_jobs(
    namespace: Namespace, watch: PodWatch, names: list[str], args: argparse.Namespace, queued: bool
) -> list[float]:
    """Create the jobs from 16 threads at once; per job, seconds from its create call to all pods Running."""
    created: dict[str, float] = {}

    def create(name: str) -> None:
        created[name] = time.monotonic()
        namespace.create_job(manifest(name, args.workers, queued))

    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(create, names))
    if not watch.wait(lambda: all(n in watch.all_running for n in names), args.timeout, lambda: None):
        raise RuntimeError(f"only {sum(n in watch.all_running for n in names)}/{len(names)} jobs Running")
    with watch.cond:
        return [watch.all_running[n] - created[n] for n in names]


def measure(api: client.ApiClient, cluster: Cluster, way: str, args: argparse.Namespace) -> dict[str, Any]:
    core, objects = client.CoreV1Api(api), client.CustomObjectsApi(api)
    queued = way == "kueue"
    namespace = Namespace(core, objects, new_namespace(core, f"bench-{way}"))
    cluster_queue = queue_up(objects, namespace.name, args.idle_jobs * args.workers) if queued else None
    watch = PodWatch(api, namespace.name, args.workers).start_and_wait()
    operator = Operator(REPO / "operator", namespace.name, cluster.kubeconfig, args.qps, args.burst)
    operator.env["DTJOB_KUEUE"] = "true" if queued else "false"
    try:
        operator.start()
        time.sleep(2)  # its readers list
        to_running = start_jobs(namespace, watch, [f"start-{i:03d}" for i in range(args.jobs)], args, queued)
        note(f"{way}: {args.jobs} jobs Running, p50 {summary(to_running)['p50']:.2f}s")
        more = [f"idle-{i:03d}" for i in range(args.idle_jobs - args.jobs)]
        start_jobs(namespace, watch, more, args, queued)
        time.sleep(5)  # the last statuses written
        pids = {"operator": operator.pid}
        if (kueue_pid := cluster.procs.pid("kueue")) is not None:
            pids["kueue"] = kueue_pid
        idle = Window(api, pids, [watch]).measure(args.window)
        note(f"{way}: idle with {args.idle_jobs} jobs: {json.dumps(idle['cpu_pct'])} % CPU")
    finally:
        operator.stop()
        watch.stop()
        delete_namespace(core, namespace.name)
        if cluster_queue:
            objects.delete_cluster_custom_object(KUEUE, "v1beta1", "clusterqueues", cluster_queue)
    return {"way": way, "to_all_running": summary(to_running), "idle": idle}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=50, help="jobs created at once, timed")
    parser.add_argument("--workers", type=int, default=8, help="pods a job")
    parser.add_argument("--idle-jobs", type=int, default=100, help="jobs Running during the idle window")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of the idle window")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--qps", type=float, default=DEFAULT_API_QPS)
    parser.add_argument("--burst", type=int, default=DEFAULT_API_BURST)
    args = parser.parse_args()
    cluster = tier_b(str(REPO / CRD_FILE))
    cluster.up_kueue()
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = 2 * CREATE_THREADS
    api = client.ApiClient(cfg)
    results = []
    try:
        add_capacity(cluster, client.CoreV1Api(api), args.idle_jobs * args.workers)
        for way in ("direct", "kueue"):
            results.append(measure(api, cluster, way, args))
    finally:
        delete_capacity(cluster)
    print(
        f"== {args.jobs} jobs x {args.workers} pods created at once; seconds from create to all pods Running"
    )
    for r in results:
        s = r["to_all_running"]
        print(f"{r['way']:8} p50 {s['p50']:.2f}  p95 {s['p95']:.2f}  max {s['max']:.2f}")
    print(f"== idle over {args.window:.0f}s with {args.idle_jobs} jobs Running")
    for r in results:
        idle = r["idle"]
        print(
            f"{r['way']:8} CPU % {json.dumps(idle['cpu_pct'])}  apiserver requests/s {idle['requests_per_s']}"
        )
    print("RESULT " + json.dumps({"jobs": args.jobs, "workers": args.workers, "results": results}))


if __name__ == "__main__":
    main()
