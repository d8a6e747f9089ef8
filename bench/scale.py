"""Fleet scale: N jobs submitted at once onto tier B's fake GPU nodes. How fast their gangs start next to
a bare client of the same QPS, what the operator costs once they all run, and how fast a preempted gang
comes back while every other job is live.

    .venv/bin/python -m bench.scale [--jobs 200] [--workers 8] [--rounds 20] [--window 60]
                                    [--operator-src PATH]... [--skip PHASE,...] [--keep-nodes]

Tier B (brought up if needed, left up). The operator under test runs as a subprocess,
`python -m kopf run --standalone --namespace NS -m dtjob.runtime` (dtjob.handlers in older checkouts), with PYTHONPATH=<--operator-src>
(default: this checkout's operator/), KUBECONFIG and DTJOB_API_QPS/DTJOB_API_BURST (--qps/--burst), so
its CPU and memory are read from /proc/PID. Give --operator-src more than once to measure several
checkouts in one run, one after the other, each in a fresh namespace on the same nodes; e.g. a
before-checkout made with `git worktree add /tmp/dtjob-before <commit>`. The CRD is this checkout's.

A job: PyTorch, Master x1 + Worker x(workers-1), 1 nvidia-h100-80gb GPU a pod, nccl TCP,
maxPreemptions 50. One raw pod watch per namespace timestamps every event as it arrives.

1. capacity   adds kwok nodes shaped like tier B's on-demand H100 nodes (named scale-NNNN, labelled
              bench.dtjob.io/scale=true) until every pod gets a GPU; deleted at the end (--keep-nodes).
2. baseline   apiserver requests/s with no operator running (--baseline s): kwok's leases and the like.
3. startup    the jobs created from 16 threads; per job, create call -> all pods created / Running.
4. idle       after --settle s, over --window s: the operator's CPU (utime+stime) as % of a core, its
              VmRSS/VmHWM, the cluster components' CPU, and apiserver requests/s by verb and resource
              from the apiserver's own apiserver_request_total (the benchmark's own requests taken out).
              An operator that resyncs (c6e6ce7: every 30 s) needs a window spanning a few resyncs.
5. reporting  every pod posting progress reports to the operator's intake every --report-interval s
              (pod-bound tokens from TokenRequest, as a kubelet projects them; bench/progress_reporting.py),
              then a window as idle's: the operator's and the apiserver's cost of taking them. Skipped
              for an operator from before the intake.
6. preemption --rounds times, one at a time: a Running job's non-rank-0 pod is preempted as GKE spot does
              (kwok: Failed, DisruptionTarget=True); from the moment the watch sees it Failed until
              status.restarts.preemptions counts it, and until the new attempt's gang is all Running.
7. cleanup    the jobs deleted while the operator runs (it removes its finalizers), the namespace
              deleted and waited for, then the operator stopped.
8. floor      in a fresh namespace, the same pods (the operator's own pod spec) created by a bare client
              from 16 threads under the same QPS/burst token bucket; per "job", from the start to its
              pods all Running, as the jobs above were all submitted at once. Ratio: operator p50 / floor p50.

Progress goes to stderr, figures to stdout, then a one-line `RESULT {json}`. kwok starts a pod in
milliseconds: the figures are the operator's and the control plane's share.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

from bench.gang_on_tier_b import CRD_FILE, Namespace, new_namespace, tier_b, wait
from bench.progress_reporting import reporting
from dtjob.core.names import ATTEMPT_LABEL
from dtjob.kube.throttle import TokenBucket
from dtjob.settings import DEFAULT_API_BURST, DEFAULT_API_QPS
from localcluster import Cluster, fakenodes, sim
from localcluster.cluster import TIER_COMPONENTS
from localcluster.procs import Processes
from tests.support.jobs import GROUP, JOB_LABEL, PLURAL, VERSION, pytorch_job

REPO = Path(__file__).resolve().parent.parent
ACCELERATOR = fakenodes.DEFAULT_ACCELERATOR
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
SCALE_LABEL = "bench.dtjob.io/scale"
CREATE_THREADS = 16
WATCH_SECONDS = 6 * 3600  # one watch call for the whole run: a call that ends is a request counted
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LOG_DIR = Path("/tmp/bench-scale")
PHASES = ("capacity", "baseline", "startup", "idle", "reporting", "preemption", "floor")


def note(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- figures
def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = math.floor(k), math.ceil(k)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def summary(values: Iterable[float]) -> dict[str, float]:
    values = list(values)
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(quantile(values, 0.5), 3),
        "p95": round(quantile(values, 0.95), 3),
        "max": round(max(values), 3),
    }


def figures(label: str, stats: dict[str, float], width: int = 22) -> str:
    if not stats.get("n"):
        return f"{label:{width}s} -"
    return (
        f"{label:{width}s} p50 {stats['p50']:7.3f}  p95 {stats['p95']:7.3f}  max {stats['max']:7.3f}"
        f"  (n {stats['n']})"
    )


# ------------------------------------------------------------------------------------- process stats
def cpu_seconds(pid: int) -> float:
    """utime + stime of the process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (the peak RSS so far)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def component_pids(cluster: Cluster) -> dict[str, int]:
    procs = Processes(cluster.layout)
    return {name: pid for name in TIER_COMPONENTS["B"] if (pid := procs.pid(name))}


# ------------------------------------------------------------------------------- apiserver requests
METRIC = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.MULTILINE)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def apiserver_requests(api: client.ApiClient) -> Counter[str]:
    """apiserver_request_total summed by verb and resource[/subresource], from the apiserver's /metrics."""
    method, url, headers, _, _ = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(method, url, header_params=headers)
    response.read()
    counts: Counter[str] = Counter()
    for labels_text, value in METRIC.findall(response.data.decode()):
        labels = dict(LABEL.findall(labels_text))
        if labels.get("resource"):
            resource = labels["resource"] + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        else:  # a non-resource URL, in `subresource`; /metrics is not counted
            resource = "/" + labels.get("subresource", "").lstrip("/")
        counts[f"{labels.get('verb', '?')} {resource}"] += int(float(value))
    return counts


class Window:
    """CPU of some processes and the apiserver's request counts over a stretch of time in which the
    benchmark itself makes no request (its watches stay open; one that ended is taken out)."""

    def __init__(self, api: client.ApiClient, pids: dict[str, int], watches: Iterable[PodWatch]) -> None:
        self.api, self.pids, self.watches = api, pids, list(watches)

    def measure(self, seconds: float) -> dict[str, Any]:
        own = sum((w.requests for w in self.watches), Counter())
        cpu = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        before, start = apiserver_requests(self.api), time.monotonic()
        time.sleep(seconds)
        after, elapsed = apiserver_requests(self.api), time.monotonic() - start
        cpu = {name: cpu_seconds(pid) - cpu[name] for name, pid in self.pids.items()}
        counted = after - before
        counted -= sum((w.requests for w in self.watches), Counter()) - own
        rates = {key: round(n / elapsed, 3) for key, n in counted.most_common()}
        return {
            "seconds": round(elapsed, 1),
            "cpu_s": {name: round(s, 2) for name, s in cpu.items()},
            "cpu_pct": {name: round(100 * s / elapsed, 1) for name, s in cpu.items()},
            "requests_per_s": round(sum(counted.values()) / elapsed, 2),
            "requests_per_s_by": rates,
        }


# ----------------------------------------------------------------------------------------- pod watch
class PodWatch(threading.Thread):
    """One raw watch on a namespace's pods (no polling): per pod the arrival time of the events that
    matter, per job (JOB_LABEL) when its `gang`-th pod appeared and when its `gang`-th pod ran."""

    def __init__(self, api: client.ApiClient, namespace: str, gang: int) -> None:
        super().__init__(daemon=True, name=f"watch-{namespace}")
        self.core, self.namespace, self.gang = client.CoreV1Api(api), namespace, gang
        self.cond = threading.Condition()
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> what the events said
        self.by_job: dict[str, set[str]] = defaultdict(set)
        self.all_created: dict[str, float] = {}  # job -> its gang-th pod first seen
        self.all_running: dict[str, float] = {}  # job -> its gang-th pod first seen Running
        self.sample: dict[str, Any] | None = None  # the first pod, as created
        self.requests: Counter[str] = Counter()  # our own calls that ended (the apiserver counts them)
        self.events = 0
        self.ready = threading.Event()
        self._stopping = threading.Event()
        self._response: Any = None
        self._seen: Counter[str] = Counter()
        self._ran: Counter[str] = Counter()

    def _apply(self, kind: str, pod: dict[str, Any], t: float) -> None:
        meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
        state = self.pods.get(meta["uid"])
        if state is None:
            labels = meta.get("labels") or {}
            job = labels.get(JOB_LABEL, "")
            state = self.pods[meta["uid"]] = {
                "uid": meta["uid"], "name": meta["name"], "job": job, "attempt": labels.get(ATTEMPT_LABEL),
                "phase": None, "running": None, "failed": None, "deleting": False, "gone": False,
            }  # fmt: skip
            self.by_job[job].add(meta["uid"])
            self._seen[job] += 1
            if self._seen[job] == self.gang:
                self.all_created[job] = t
            if self.sample is None:
                self.sample = pod
        state["phase"] = phase
        if phase == "Running" and state["running"] is None:
            state["running"] = t
            self._ran[state["job"]] += 1
            if self._ran[state["job"]] == self.gang:
                self.all_running[state["job"]] = t
        if phase == "Failed" and state["failed"] is None:
            state["failed"] = t
        state["deleting"] = state["deleting"] or bool(meta.get("deletionTimestamp"))
        state["gone"] = state["gone"] or kind == "DELETED"
        self.events += 1

    def run(self) -> None:
        while not self._stopping.is_set():
            watching = False
            try:
                listed = json.loads(
                    self.core.list_namespaced_pod(self.namespace, _preload_content=False).data
                )
                self.requests["LIST pods"] += 1
                with self.cond:
                    for pod in listed["items"]:
                        self._apply("ADDED", pod, time.monotonic())
                    self.cond.notify_all()
                self._response = self.core.list_namespaced_pod(
                    self.namespace, watch=True, resource_version=listed["metadata"]["resourceVersion"],
                    allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS, _preload_content=False,
                )  # fmt: skip
                watching = True
                self.ready.set()
                for line in iter_resp_lines(self._response):
                    t = time.monotonic()
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # e.g. 410 Gone: list afresh
                        break
                    if event["type"] != "BOOKMARK":
                        with self.cond:
                            self._apply(event["type"], event["object"], t)
                            self.cond.notify_all()
            except Exception as err:
                if not self._stopping.is_set():
                    note(f"pod watch of {self.namespace} restarts after {type(err).__name__}: {err}")
                    time.sleep(0.5)
            finally:
                if watching:
                    self.requests["WATCH pods"] += 1

    def start_and_wait(self) -> PodWatch:
        self.start()
        if not self.ready.wait(60):
            raise TimeoutError(f"no pod watch on {self.namespace}")
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._response is not None:
            with contextlib.suppress(Exception):
                self._response.shutdown()  # unblocks the reader
        self.join(10)

    def wait(
        self, probe: Callable[[], Any], timeout: float, progress: Callable[[], None] | None = None
    ) -> Any:
        """Until `probe` (called under the lock, after every event) gives something true; None on timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not (result := probe()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(min(left, 1.0))
                if progress:
                    progress()
            return result

    # under the lock:
    def live(self, job: str) -> list[dict[str, Any]]:
        pods = (self.pods[uid] for uid in self.by_job.get(job, ()))
        return [p for p in pods if not p["gone"] and not p["deleting"]]

    def gang_running_at(self, job: str, attempt: str) -> float | None:
        """When the last pod of the attempt's gang started Running, if all of them run."""
        pods = [p for p in self.live(job) if p["attempt"] == attempt]
        if len(pods) != self.gang or any(p["phase"] != "Running" for p in pods):
            return None
        return max(p["running"] for p in pods)


# ------------------------------------------------------------------------------------------ operator
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Operator:
    """dtjob from a checkout's operator/ directory, `kopf run --standalone` watching one namespace."""

    def __init__(self, src: Path, namespace: str, kubeconfig: Path, qps: float, burst: int) -> None:
        self.src, self.namespace = src, namespace
        self.env = {
            **os.environ,
            "PYTHONPATH": str(src),
            "KUBECONFIG": str(kubeconfig),
            "DTJOB_API_QPS": f"{qps:g}",
            "DTJOB_API_BURST": str(burst),
            "DTJOB_NAMESPACES": namespace,
        }  # fmt: skip  (an older checkout ignores it)
        self.env.pop("DTJOB_METRICS_PORT", None)
        progress_port = free_port()  # the intake's (an older checkout ignores it)
        self.progress_url = f"http://127.0.0.1:{progress_port}/v1/progress"
        self.env.update(DTJOB_PROGRESS_PORT=str(progress_port), DTJOB_PROGRESS_URL=self.progress_url)
        self.log = LOG_DIR / f"operator-{namespace}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        # The checkout's Kopf module: dtjob.runtime, dtjob.handlers before the reorganisation (4th wave).
        hooks = "dtjob.runtime" if (self.src / "dtjob" / "runtime").is_dir() else "dtjob.handlers"
        probe = subprocess.run(
            [sys.executable, "-c", f"import {hooks}, dtjob; print(dtjob.__file__)"],
            env=self.env, cwd=self.src, capture_output=True, text=True,
        )  # fmt: skip
        where = Path(probe.stdout.strip() or "/nonexistent").resolve()
        if probe.returncode != 0 or not where.is_relative_to(self.src.resolve()):
            raise SystemExit(f"{hooks} does not import from {self.src}: {probe.stderr[-2000:] or where}")
        port = free_port()
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kopf", "run", "--standalone", "--namespace", self.namespace,
                 "-m", hooks, f"--liveness=http://127.0.0.1:{port}/healthz"],
                env=self.env, cwd=self.src, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

        def healthy() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                return bool(
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).status == 200
                )
            return False

        wait(healthy, "operator liveness", timeout=120, every=0.2)
        note(f"operator pid {self.pid} from {where.parent}, log {self.log}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        errors = sum("Traceback" in line for line in self.log.read_text(errors="replace").splitlines())
        if errors:
            note(f"the operator's log holds {errors} tracebacks: {self.log}")


# ------------------------------------------------------------------------------------------ capacity
def free_gpus(core: client.CoreV1Api) -> int:
    """GPUs left on the Ready on-demand nodes of the accelerator (spot nodes' taint keeps our pods off)."""
    nodes = json.loads(
        core.list_node(label_selector=f"{ACCELERATOR_LABEL}={ACCELERATOR}", _preload_content=False).data
    )["items"]
    free: dict[str, int] = {}
    for node in nodes:
        taints = {t["key"] for t in node["spec"].get("taints") or []}
        conditions = node.get("status", {}).get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        if ready and not node["spec"].get("unschedulable") and taints <= {GPU}:
            free[node["metadata"]["name"]] = int(node["status"]["allocatable"].get(GPU, 0))
    pods = json.loads(
        core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False
        ).data
    )["items"]
    for pod in pods:
        if (node_name := pod["spec"].get("nodeName")) in free:
            for container in pod["spec"]["containers"]:
                resources = container.get("resources") or {}
                free[node_name] -= int(
                    (resources.get("requests") or resources.get("limits") or {}).get(GPU, 0)
                )
    return sum(max(0, gpus) for gpus in free.values())


def scale_node(index: int) -> dict[str, Any]:
    """Like tier B's on-demand nodes (fakenodes.gpu_node), named scale-NNNN and labelled as ours."""
    node = fakenodes.gpu_node(1000 + index, accelerator=ACCELERATOR, gpus=GPUS_PER_NODE)
    name = f"scale-{index:04d}"
    node["metadata"]["name"] = name
    node["metadata"]["labels"].update(
        {"kubernetes.io/hostname": name, "cloud.google.com/gce-topology-host": name, SCALE_LABEL: "true"}
    )
    return node


def scale_nodes(core: client.CoreV1Api) -> list[dict[str, Any]]:
    listed = core.list_node(label_selector=f"{SCALE_LABEL}=true", _preload_content=False)
    items: list[dict[str, Any]] = json.loads(listed.data)["items"]
    return items


def add_capacity(cluster: Cluster, core: client.CoreV1Api, pods: int) -> int:
    """Add scale- nodes until `pods` one-GPU pods fit; how many were added."""
    missing = pods - free_gpus(core)
    if missing <= 0:
        return 0
    have = {n["metadata"]["name"] for n in scale_nodes(core)}
    count = math.ceil(missing / GPUS_PER_NODE)
    fresh = [i for i in range(len(have) + count) if f"scale-{i:04d}" not in have][:count]
    started = time.monotonic()
    for chunk in range(0, count, 200):
        fakenodes.apply_nodes(cluster.layout, [scale_node(i) for i in fresh[chunk : chunk + 200]])

    def schedulable() -> bool:
        ok = 0
        for node in scale_nodes(core):
            conditions = node.get("status", {}).get("conditions") or []
            taints = node["spec"].get("taints") or []
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            ok += ready and not any(t["key"].startswith("node.kubernetes.io/") for t in taints)
        return ok >= len(have) + count

    wait(schedulable, f"{count} scale- nodes Ready and schedulable", timeout=300 + count, every=1.0)
    note(f"added {count} scale- nodes ({count * GPUS_PER_NODE} GPUs) in {time.monotonic() - started:.1f}s")
    return count


def delete_capacity(cluster: Cluster) -> None:
    cluster.kubectl("delete", "nodes", "-l", f"{SCALE_LABEL}=true", "--wait=false")


# -------------------------------------------------------------------------------------------- phases
def job_manifest(name: str, pods: int) -> dict[str, Any]:
    job = pytorch_job(
        name, workers=pods - 1, master=True,
        accelerator={"type": ACCELERATOR, "count": 1}, runPolicy={"maxPreemptions": 50},
    )  # fmt: skip
    for replica in job["spec"]["replicas"]:
        replica["template"]["spec"]["terminationGracePeriodSeconds"] = 1  # as a kubelet would take: kwok's
    return job


def progress_note(what: str, watch: PodWatch, started: float, total: int) -> Callable[[], None]:
    last = [time.monotonic()]

    def report() -> None:  # under the watch's lock
        if time.monotonic() - last[0] >= 15:
            last[0] = time.monotonic()
            running = sum(p["running"] is not None for p in watch.pods.values())
            note(
                f"{what}: t+{last[0] - started:.0f}s {len(watch.pods)} pods seen, {running} Running, "
                f"{len(watch.all_running)}/{total} gangs Running"
            )

    return report


def startup(
    api: client.ApiClient, namespace: Namespace, watch: PodWatch, operator: Operator, args: argparse.Namespace
) -> dict[str, Any]:
    """Create the jobs from 16 threads at once; per job, create call -> all pods created / Running."""
    names = [f"job-{i:04d}" for i in range(args.jobs)]
    created: dict[str, float] = {}
    errors: list[str] = []

    def create(name: str) -> None:
        start = time.monotonic()
        try:
            namespace.create_job(job_manifest(name, args.workers))
            created[name] = start
        except client.ApiException as err:
            errors.append(f"{name}: {err.status} {err.reason}")

    cpu, requests_before = cpu_seconds(operator.pid), apiserver_requests(api)
    started = time.monotonic()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(create, names))
    issued = time.monotonic() - started
    note(f"startup: {len(created)} jobs created in {issued:.1f}s, {len(errors)} errors {errors[:3]}")
    done = watch.wait(
        lambda: len(watch.all_running) >= len(created) or not operator.alive(),
        args.timeout,
        progress_note("startup", watch, started, len(created)),
    )
    if not operator.alive():
        raise RuntimeError(f"the operator died:\n{operator.log_tail()}")
    ended = time.monotonic()
    cpu = cpu_seconds(operator.pid) - cpu
    requests = apiserver_requests(api) - requests_before
    with watch.cond:
        to_created = [watch.all_created[n] - t for n, t in created.items() if n in watch.all_created]
        to_running = [watch.all_running[n] - t for n, t in created.items() if n in watch.all_running]
        last = max((watch.all_running[n] for n in created if n in watch.all_running), default=None)
    if not done:
        note(f"startup: only {len(to_running)}/{len(created)} gangs Running after {args.timeout:.0f}s")
    return {
        "jobs": len(created),
        "create_errors": len(errors),
        "create_issue_s": round(issued, 2),
        "all_running": bool(done),
        "to_all_pods_created": summary(to_created),
        "to_all_pods_running": summary(to_running),
        "makespan_s": round(last - started, 2) if last else None,
        "operator_cpu_s": round(cpu, 1),
        "operator_cpu_pct": round(100 * cpu / (ended - started), 1),
        "apiserver_requests": sum(requests.values()),
        "apiserver_requests_by": dict(requests.most_common(12)),
    }


def preemption(
    namespace: Namespace, watch: PodWatch, operator: Operator, rounds: int, rng: random.Random
) -> dict[str, Any]:
    """One at a time: preempt a non-rank-0 pod of a Running job; from its Failed (as the watch saw it) to
    the restart counted in the status and to the new attempt's gang Running."""
    with watch.cond:
        jobs = sorted(watch.all_running)
    picks = rng.sample(jobs, min(rounds, len(jobs))) + [rng.choice(jobs) for _ in range(rounds - len(jobs))]
    records: list[dict[str, Any]] = []

    def status(job: str) -> dict[str, Any]:
        found = namespace.jobs.get_namespaced_custom_object(GROUP, VERSION, namespace.name, PLURAL, job)
        return dict(found.get("status") or {})

    def preemptions(job: str) -> int:
        return int((status(job).get("restarts") or {}).get("preemptions", 0))

    for job in picks:
        time.sleep(1.0)
        attempt = str(status(job).get("attempt", 1))
        if not watch.wait(lambda: watch.gang_running_at(job, attempt), 120):  # noqa: B023 (called now)
            raise TimeoutError(f"{job}: attempt {attempt} not all Running")
        with watch.cond:  # rank 0 is the master
            uid = {p["name"]: p["uid"] for p in watch.live(job) if p["attempt"] == attempt}
        victim = rng.choice(sorted(name for name in uid if "-master-" not in name))
        before = preemptions(job)
        patched = time.monotonic()
        sim.preempt_pod(namespace.core, namespace.name, victim)
        record: dict[str, Any] = {"job": job, "victim": victim}
        try:
            failed = watch.wait(lambda: watch.pods[uid[victim]]["failed"], 60)  # noqa: B023
            if failed is None:
                raise TimeoutError(f"{victim} not Failed")
            record["patch_to_failed_s"] = round(failed - patched, 3)
            recorded = wait(lambda: preemptions(job) > before, "restart in the status", 120)  # noqa: B023
            record["restart_recorded_s"] = round(recorded - failed, 3)
            new = str(status(job).get("attempt"))
            running = watch.wait(lambda: watch.gang_running_at(job, new), 120)  # noqa: B023
            if running is None:
                raise TimeoutError(f"{job}: attempt {new} not all Running")
            record["gang_running_s"] = round(running - failed, 3)
        except TimeoutError as err:
            note(f"preemption round {len(records) + 1}: {err}; operator alive: {operator.alive()}")
            records.append({**record, "error": str(err)})
            break
        records.append(record)
    return {
        "rounds": len(records),
        "restart_recorded": summary(r["restart_recorded_s"] for r in records if "restart_recorded_s" in r),
        "gang_running": summary(r["gang_running_s"] for r in records if "gang_running_s" in r),
        "patch_to_failed": summary(r["patch_to_failed_s"] for r in records if "patch_to_failed_s" in r),
        "per_round": records,
    }


def delete_namespace(core: client.CoreV1Api, name: str, timeout: float = 900) -> float:
    started = time.monotonic()
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except client.ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait(gone, f"namespace {name} gone", timeout, every=1.0)
    return time.monotonic() - started


def cleanup(namespace: Namespace, operator: Operator, timeout: float) -> dict[str, float]:
    """Delete the jobs while the operator runs (it removes its finalizers), then the namespace."""
    out: dict[str, float] = {}
    started = time.monotonic()
    try:
        namespace.delete_jobs(timeout=timeout, every=0.5)
        out["delete_jobs_s"] = round(time.monotonic() - started, 1)
    except TimeoutError as err:  # a dead or stuck operator: take its finalizers off by hand
        note(f"cleanup: {err} (operator alive: {operator.alive()}); removing the finalizers by hand")
        listed = namespace.jobs.list_namespaced_custom_object(GROUP, VERSION, namespace.name, PLURAL)
        for job in listed["items"]:
            with contextlib.suppress(client.ApiException):
                namespace.jobs.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace.name, PLURAL, job["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )  # fmt: skip
    out["delete_namespace_s"] = round(delete_namespace(namespace.core, namespace.name), 1)
    note(f"cleanup: {out}")
    return out


def measure_operator(
    api: client.ApiClient, cluster: Cluster, src: Path, args: argparse.Namespace, skip: set[str]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Every operator phase for one checkout's operator; its figures and a pod it created."""
    core = client.CoreV1Api(api)
    namespace = Namespace(core, client.CustomObjectsApi(api), new_namespace(core, "bench-scale"))
    watch = PodWatch(api, namespace.name, args.workers).start_and_wait()
    operator = Operator(src, namespace.name, cluster.kubeconfig, args.qps, args.burst)
    result: dict[str, Any] = {"operator_src": str(src), "namespace": namespace.name}
    note(f"== operator from {src}: namespace {namespace.name}, {args.jobs} jobs x {args.workers} pods")
    try:
        operator.start()
        time.sleep(2)  # its watches start
        result["startup"] = startup(api, namespace, watch, operator, args)
        print_startup(result)
        if "idle" not in skip and result["startup"]["all_running"]:
            time.sleep(args.settle)
            pids = {"operator": operator.pid, **component_pids(cluster)}
            note(f"idle: measuring over {args.window:.0f}s")
            result["idle"] = Window(api, pids, [watch]).measure(args.window)
            result["idle"]["operator_memory_mib"] = memory_mib(operator.pid)
            print_idle(result["idle"], args.baseline_figures)
        if "reporting" not in skip and result["startup"]["all_running"]:
            with watch.cond:
                pods = {p["name"]: p["uid"] for job in watch.all_running for p in watch.live(job)}
            pids = {"operator": operator.pid, **component_pids(cluster)}
            measured = reporting(
                core, namespace.name, pods, operator.progress_url, args.report_interval,
                Window(api, pids, [watch]).measure, args.window, note,
            )  # fmt: skip
            if measured is not None:
                measured["operator_memory_mib"] = memory_mib(operator.pid)
                result["reporting"] = measured
                print_reporting(measured, result.get("idle"))
        if "preemption" not in skip and args.rounds and result["startup"]["all_running"]:
            note(f"preemption: {args.rounds} rounds")
            result["preemption"] = preemption(
                namespace, watch, operator, args.rounds, random.Random(args.seed)
            )
            print_preemption(result["preemption"])
        result["operator_memory_mib"] = memory_mib(operator.pid)
        result["cleanup"] = cleanup(namespace, operator, timeout=args.timeout)
    except BaseException:
        with contextlib.suppress(Exception):
            cleanup(namespace, operator, timeout=120)
        raise
    finally:
        operator.stop()
        watch.stop()
    return result, watch.sample


def floor_pod(template: dict[str, Any] | None, name: str, job: str) -> dict[str, Any]:
    """A pod as the operator creates it (its spec, less what binding and admission added), or else one
    of the same shape: one GPU, the accelerator's nodeSelector and the GPU toleration."""
    if template is None:
        spec: dict[str, Any] = {
            "containers": [{"name": "trainer", "image": "localhost/none:1", "command": ["python", "train.py"],
                            "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}}],
            "nodeSelector": {ACCELERATOR_LABEL: ACCELERATOR},
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
        }  # fmt: skip
    else:
        spec = copy.deepcopy(template["spec"])
        for key in ("nodeName", "schedulingGates"):
            spec.pop(key, None)
        token = {v["name"] for v in spec.get("volumes") or [] if v["name"].startswith("kube-api-access-")}
        spec["volumes"] = [v for v in spec.get("volumes") or [] if v["name"] not in token]
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            container["volumeMounts"] = [
                m for m in container.get("volumeMounts") or [] if m["name"] not in token
            ]
    labels = {JOB_LABEL: job, ATTEMPT_LABEL: "1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def floor(api: client.ApiClient, args: argparse.Namespace, template: dict[str, Any] | None) -> dict[str, Any]:
    """The same pods from a bare client under the same QPS; per job, from the start to all its pods Running."""
    core = client.CoreV1Api(api)
    namespace = new_namespace(core, "bench-scale-floor")
    watch = PodWatch(api, namespace, args.workers).start_and_wait()
    note(f"== floor: namespace {namespace}, {args.jobs * args.workers} pods at QPS {args.qps:g}/{args.burst}")
    jobs = [f"floor-{j:04d}" for j in range(args.jobs)]
    pods = [floor_pod(template, f"{job}-{k}", job) for job in jobs for k in range(args.workers)]
    bucket, errors = TokenBucket(args.qps, args.burst), []

    def create(pod: dict[str, Any]) -> None:
        bucket.take()
        try:
            core.create_namespaced_pod(namespace, pod, _preload_content=False)
        except client.ApiException as err:
            errors.append(f"{pod['metadata']['name']}: {err.status} {err.reason}")

    result: dict[str, Any] = {"pods": len(pods)}
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(create, pods))
        issued = time.monotonic() - started
        note(f"floor: {len(pods)} pods created in {issued:.1f}s, {len(errors)} errors {errors[:3]}")
        done = watch.wait(
            lambda: len(watch.all_running) >= len(jobs),
            args.timeout,
            progress_note("floor", watch, started, len(jobs)),
        )
        with watch.cond:
            to_running = [t - started for t in watch.all_running.values()]
        result |= {
            "create_errors": len(errors),
            "create_issue_s": round(issued, 2),
            "all_running": bool(done),
            "template": "operator's pod" if template else "synthetic",
            "to_all_pods_running": summary(to_running),
            "makespan_s": round(max(to_running), 2) if to_running else None,
        }
    finally:
        watch.stop()
        result["delete_namespace_s"] = round(delete_namespace(core, namespace), 1)
    return result


# ------------------------------------------------------------------------------------------ printing
def print_startup(result: dict[str, Any]) -> None:
    s = result["startup"]
    print(
        f"\n== {result['operator_src']}: seconds from creating a job to: ({s['jobs']} jobs at once, tier B)"
    )
    print(figures("all pods created", s["to_all_pods_created"]))
    print(figures("all pods Running", s["to_all_pods_running"]))
    print(
        f"makespan {s['makespan_s']} s; jobs created in {s['create_issue_s']} s ({s['create_errors']} errors);"
        f" operator CPU {s['operator_cpu_s']} s ({s['operator_cpu_pct']}% of a core);"
        f" {s['apiserver_requests']} apiserver requests"
    )


def print_idle(idle: dict[str, Any], baseline: dict[str, Any] | None, top: int = 12) -> None:
    memory = idle["operator_memory_mib"]
    print(f"\n== idle, every job Running, over {idle['seconds']} s")
    print(
        f"operator CPU {idle['cpu_s']['operator']} s = {idle['cpu_pct']['operator']}% of a core;"
        f" VmRSS {memory['VmRSS']} MiB, VmHWM {memory['VmHWM']} MiB"
    )
    print(
        "cluster CPU, % of a core: "
        + ", ".join(f"{k} {v}" for k, v in idle["cpu_pct"].items() if k != "operator")
    )
    base = baseline["requests_per_s_by"] if baseline else {}
    total = idle["requests_per_s"] - (baseline["requests_per_s"] if baseline else 0)
    print(
        f"apiserver requests/s: {idle['requests_per_s']}"
        + (f" (baseline {baseline['requests_per_s']}, so {total:.2f} with the operator)" if baseline else "")
    )
    rates = idle["requests_per_s_by"]
    over = sorted(((rate - base.get(key, 0), key) for key, rate in rates.items()), reverse=True)
    for title, keys in (
        ("the busiest", list(rates)[:top]),
        ("the most over the baseline", [key for diff, key in over[:top] if diff >= 0.05] if baseline else []),
    ):
        if keys:
            print(
                f"  {title + ':':44s} {'req/s':>8s}"
                + (f" {'baseline':>9s} {'- base':>8s}" if baseline else "")
            )
        for key in keys:
            diff = f" {base.get(key, 0):9.2f} {rates[key] - base.get(key, 0):8.2f}" if baseline else ""
            print(f"  {key:44s} {rates[key]:8.2f}{diff}")


def print_reporting(busy: dict[str, Any], idle: dict[str, Any] | None) -> None:
    reports, memory = busy["reports"], busy["operator_memory_mib"]
    print(f"\n== reporting, every pod of every job posting progress, over {busy['seconds']} s")
    print(
        f"{reports['pods']} pods, {reports['reports_per_s']} reports/s, answers {reports['answers']},"
        f" latency {reports['latency_ms']} ms (the benchmark's reporters: {busy['benchmark_cpu_pct']}% of a core)"
    )
    was = f" (idle {idle['cpu_pct']['operator']}%)" if idle else ""
    print(
        f"operator CPU {busy['cpu_s']['operator']} s = {busy['cpu_pct']['operator']}% of a core{was};"
        f" VmRSS {memory['VmRSS']} MiB, VmHWM {memory['VmHWM']} MiB"
    )
    print(
        f"apiserver requests/s: {busy['requests_per_s']}"
        + (f" (idle {idle['requests_per_s']})" if idle else "")
    )
    for key, rate in list(busy["requests_per_s_by"].items())[:8]:
        print(f"  {key:44s} {rate:8.2f}")


def print_preemption(result: dict[str, Any]) -> None:
    print(f"\n== seconds from a preempted pod Failed to: ({result['rounds']} rounds, every job live)")
    print(figures("restart in status", result["restart_recorded"]))
    print(figures("new gang Running", result["gang_running"]))
    print(figures("(patch to Failed)", result["patch_to_failed"]))
    print("rounds, to Running:", " ".join(f"{r.get('gang_running_s', '-')}" for r in result["per_round"]))


def print_table(results: list[dict[str, Any]], floor_result: dict[str, Any] | None) -> None:
    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    def pick(r: dict[str, Any], *path: str) -> Any:
        for key in path:
            r = r.get(key) if isinstance(r, dict) else None
        return r

    floor_p50 = pick(floor_result or {}, "to_all_pods_running", "p50")
    rows: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("start: all Running p50 s", lambda r: pick(r, "startup", "to_all_pods_running", "p50")),
        ("start: all Running p95 s", lambda r: pick(r, "startup", "to_all_pods_running", "p95")),
        ("start: all Running max s", lambda r: pick(r, "startup", "to_all_pods_running", "max")),
        ("start: p50 / floor p50", lambda r: r.get("floor_ratio")),
        ("start: operator CPU s", lambda r: pick(r, "startup", "operator_cpu_s")),
        ("idle: operator CPU %", lambda r: pick(r, "idle", "cpu_pct", "operator")),
        ("idle: VmRSS MiB", lambda r: pick(r, "idle", "operator_memory_mib", "VmRSS")),
        ("VmHWM MiB (end)", lambda r: pick(r, "operator_memory_mib", "VmHWM")),
        ("idle: apiserver req/s", lambda r: pick(r, "idle", "requests_per_s")),
        ("idle: req/s - baseline", lambda r: r.get("idle_requests_over_baseline")),
        ("idle: apiserver CPU %", lambda r: pick(r, "idle", "cpu_pct", "kube-apiserver")),
        ("reporting: reports/s", lambda r: pick(r, "reporting", "reports", "reports_per_s")),
        ("reporting: operator CPU %", lambda r: pick(r, "reporting", "cpu_pct", "operator")),
        ("reporting: VmRSS MiB", lambda r: pick(r, "reporting", "operator_memory_mib", "VmRSS")),
        ("reporting: apiserver req/s", lambda r: pick(r, "reporting", "requests_per_s")),
        ("preempt: restart p50 s", lambda r: pick(r, "preemption", "restart_recorded", "p50")),
        ("preempt: restart p95 s", lambda r: pick(r, "preemption", "restart_recorded", "p95")),
        ("preempt: Running p50 s", lambda r: pick(r, "preemption", "gang_running", "p50")),
        ("preempt: Running p95 s", lambda r: pick(r, "preemption", "gang_running", "p95")),
    ]
    width = max([28, *(len(r["operator_src"]) + 2 for r in results)])  # no operator: the baseline alone
    print(f"\n== summary{'':17s}" + "".join(f"{r['operator_src']:>{width}s}" for r in results))
    for label, get in rows:
        print(f"{label:26s}" + "".join(f"{cell(get(r)):>{width}s}" for r in results))
    if floor_result:
        f = floor_result["to_all_pods_running"]
        print(
            f"floor (bare client, same QPS): all Running p50 {cell(floor_p50)} p95 {cell(f.get('p95'))}"
            f" max {cell(f.get('max'))} s, makespan {cell(floor_result['makespan_s'])} s"
        )


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument(
        "--workers", "--pods", type=int, default=8, help="pods a job: Master x1 + Worker x(N-1)"
    )
    parser.add_argument(
        "--operator-src", type=Path, action="append", help="a checkout's operator/ (repeatable)"
    )
    parser.add_argument(
        "--qps", type=float, default=DEFAULT_API_QPS, help="the operator's and the floor's client QPS"
    )
    parser.add_argument("--burst", type=int, default=DEFAULT_API_BURST)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after all Running before idle")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of the idle window")
    parser.add_argument(
        "--baseline", type=float, default=30.0, help="seconds of the no-operator window (0: none)"
    )
    parser.add_argument(
        "--report-interval", type=float, default=10.0, help="seconds between a pod's progress reports"
    )
    parser.add_argument("--rounds", type=int, default=20, help="preemption rounds")
    parser.add_argument(
        "--timeout", type=float, help="seconds for all gangs to run (default from the pods/QPS)"
    )
    parser.add_argument(
        "--skip", default="", help=f"phases to leave out, comma-separated: {','.join(PHASES)}"
    )
    parser.add_argument("--keep-nodes", action="store_true", help="leave the scale- nodes for the next run")
    parser.add_argument("--crd", default=str(REPO / CRD_FILE))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    if unknown := skip - set(PHASES):
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if args.workers < 2:
        parser.error("--workers must be at least 2 (a master and a worker to preempt)")
    if "startup" in skip:
        skip |= {"idle", "reporting", "preemption"}
    sources = [p.resolve() for p in args.operator_src or [REPO / "operator"]]
    args.timeout = args.timeout or 300 + 4 * args.jobs * args.workers / args.qps

    cluster = tier_b(args.crd)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = 2 * CREATE_THREADS
    api = client.ApiClient(cfg)
    core = client.CoreV1Api(api)

    output: dict[str, Any] = {
        "jobs": args.jobs,
        "workers": args.workers,
        "qps": args.qps,
        "burst": args.burst,
    }
    results: list[dict[str, Any]] = []
    floor_result = template = args.baseline_figures = None
    try:
        if "capacity" not in skip:
            output["nodes_added"] = add_capacity(cluster, core, args.jobs * args.workers + args.workers)
        if "baseline" not in skip and args.baseline > 0:
            note(f"baseline: {args.baseline:.0f}s with no operator")
            args.baseline_figures = output["baseline"] = Window(api, component_pids(cluster), []).measure(
                args.baseline
            )
        if "startup" not in skip:
            for src in sources:
                result, sample = measure_operator(api, cluster, src, args, skip)
                template = template or sample
                results.append(result)
        if "floor" not in skip:
            floor_result = output["floor"] = floor(api, args, template)
    finally:
        if "capacity" not in skip and not args.keep_nodes:
            delete_capacity(cluster)
    for result in results:
        p50 = result["startup"]["to_all_pods_running"].get("p50")
        if floor_result and p50 and floor_result["to_all_pods_running"].get("p50"):
            result["floor_ratio"] = round(p50 / floor_result["to_all_pods_running"]["p50"], 2)
        if args.baseline_figures and "idle" in result:
            over = result["idle"]["requests_per_s"] - args.baseline_figures["requests_per_s"]
            result["idle_requests_over_baseline"] = round(over, 2)
    output["operators"] = results
    print_table(results, floor_result)
    brief = json.loads(json.dumps(output))
    for result in brief["operators"]:
        result.get("preemption", {}).pop("per_round", None)
    windows = [w for r in brief["operators"] for w in (r.get("idle"), r.get("reporting"))]
    for window in [brief.get("baseline"), *windows]:
        if window:
            window["requests_per_s_by"] = dict(list(window["requests_per_s_by"].items())[:15])
    print("RESULT " + json.dumps(brief), flush=True)


if __name__ == "__main__":
    main()
