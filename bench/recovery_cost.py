"""What spot preemptions cost a real training gang, by restart strategy, as status.goodput measures it.

    .venv/bin/python -m bench.recovery_cost [--preemptions 5] [--epochs 200]
                                            [--strategies Recreate,InPlace,InPlace+spare] [--workers 2]

Tier C (the real node; brought up if needed, left up): the DDP example (2 workers, real training on the
CPU over gloo, checkpoints every 20 steps on a hostPath volume) runs through the operator in-process,
with its progress intake, after a one-epoch warm-up run (a freshly imported image's first pods pay its
unpacking), once uninterrupted and then, for each runPolicy.restartStrategy in turn (the whole gang
recreated; in place), with a worker evicted (the Eviction API, as a spot reclaim's drain does) after each
of N checkpoints, each taken after the gang last resumed; InPlace+spare is InPlace with one hot spare
(spec.replicas[].spares: 1), whose trainer waits for a rank before each eviction. Prints each restart's cost phase by phase
(status.goodput.lastRestart: detection, teardown, start, restore, lost work), the pause each made in
training (from the Eviction API call to the next attempt's first step), the wall time lost per
preemption (the run's wall time less the uninterrupted run's, over N), each run's goodput, and whether
the final weights (the example's sha256 of them) are the uninterrupted run's (docs/fault-tolerance.md).

Each takeover starts a new spare, whose start-up (a container, a torch import) shares this node's CPUs
with the training ranks; on GKE a spare has a node of its own. So with InPlace+spare the benchmark also
runs the job with one spare and no preemption, evicting the waiting spare at the same N points instead
(its replacement starts as after a takeover), and prints InPlace+spare's loss against that run too: the
recovery's own cost, without the spare start-ups' share of the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from localcluster.layout import Layout

# The kubernetes client (and Kopf's login through it) reads KUBECONFIG once, when first imported.
os.environ["KUBECONFIG"] = str(Layout.from_env().kubeconfig())

from dtjob_trainer.checkpoint_files import CheckpointDirectory
from kopf.testing import KopfRunner
from kubernetes import client, config

from dtjob.api import GROUP, PLURAL, VERSION, parse_timestamp
from dtjob.core.names import ATTEMPT_LABEL, JOB_NAME_LABEL, RANK_LABEL, SPARE_LABEL
from hack import images
from hack.examples import fresh_checkpoint_dir
from localcluster import Cluster, Tier
from localcluster.layout import NODE_IP
from tests.support.ddp_digits import restart_job, result_line
from tests.support.jobs import evict
from tests.support.paths import CRD_FILE
from tests.support.ports import free_port

SPARE = "InPlace+spare"
# A restart's pause past this keeps its pods' logs (Run.keep_logs).
SLOW_PAUSE_SECONDS = 5.0
PHASES = ("detectionSeconds", "teardownSeconds", "startSeconds", "restoreSeconds", "lostWorkSeconds")


def wait(probe: Any, what: str, timeout: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f}s")
        time.sleep(0.1)
    return value


class Run:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        epochs: int,
        *extra: str,
        strategy: str = "Recreate",
        workers: int = 2,
    ) -> None:
        self.core, self.objects = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace, self.name = namespace, name
        self.job = restart_job(name)
        restart_strategy, _, spare = strategy.partition("+")
        self.spares = 1 if spare == "spare" else 0
        self.job["spec"]["runPolicy"] = {"maxPreemptions": 100, "restartStrategy": restart_strategy}
        self.job["spec"]["replicas"][0]["count"] = self.workers = workers
        self.job["spec"]["replicas"][0]["spares"] = self.spares
        trainer = self.job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
        trainer["args"][1] = str(epochs)
        trainer["args"] += extra
        self.checkpoints = CheckpointDirectory(fresh_checkpoint_dir(self.job), keep_last=1)

    def status(self) -> dict[str, Any]:
        job = self.objects.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        return dict(job.get("status") or {})

    def running(self, attempt: int) -> bool:
        status = self.still_on()
        return status.get("attempt") == attempt and status.get("phase") == "Running"

    def still_on(self) -> dict[str, Any]:
        """The status of a job that has not ended (one that has ends the benchmark)."""
        status = self.status()
        if status.get("phase") in ("Succeeded", "Failed"):
            raise RuntimeError(f"{self.name} ended before its evictions were done: give it more --epochs")
        return status

    def train(
        self, preemptions: int, spares_only: bool = False
    ) -> tuple[float, list[dict[str, Any]], dict[str, Any], str]:
        """Create, evict a worker after each of `preemptions` fresh checkpoints (`spares_only`: the
        waiting spare instead), run to Succeeded: the wall time, each restart's cost (with the pause it
        made in training, `pauseSeconds`: see `pause`), the final goodput and the weights' sha256."""
        start = time.monotonic()
        self.create()
        costs = []
        for n in range(1, preemptions + 1):
            attempt = 1 if spares_only else n
            wait(lambda attempt=attempt: self.running(attempt), f"attempt {attempt} running")
            resumed = self.checkpoints.latest_step() or 0
            wait(
                lambda resumed=resumed: (self.checkpoints.latest_step() or 0) > resumed, "a fresh checkpoint"
            )
            spare = (
                wait(lambda: self.still_on() and self.spare_waiting(), "a spare waiting for a rank")
                if self.spares
                else None
            )
            if spares_only:
                assert spare is not None
                evict(self.core, self.namespace, spare)
                continue
            evicted_at = datetime.now(UTC)
            evict(self.core, self.namespace, self.holder(attempt, attempt % self.workers))

            def cost(attempt: int = attempt) -> dict[str, Any] | None:
                last = (self.status().get("goodput") or {}).get("lastRestart") or {}
                done = last.get("attempt") == attempt + 1 and last.get("totalSeconds") is not None
                return last if done else None

            done = wait(cost, f"the cost of restart {attempt}")
            costs.append(done | {"pauseSeconds": pause(done, evicted_at)})
            if costs[-1]["pauseSeconds"] > SLOW_PAUSE_SECONDS:
                self.keep_logs(f"restart-{attempt}")
        weights = self.finish()
        return time.monotonic() - start, costs, self.status().get("goodput") or {}, weights

    def create(self) -> None:
        self.objects.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.job)

    def finish(self) -> str:
        """Once the job has ended (Succeeded, or this fails): the sha256 of its final weights."""
        wait(lambda: self.status().get("phase") in ("Succeeded", "Failed"), "the end", timeout=1200)
        status = self.status()
        assert status["phase"] == "Succeeded", status
        rank_zero = self.holder(status["attempt"], 0)
        return str(result_line(self.core, self.namespace, rank_zero)["weights_sha256"])

    def keep_logs(self, what: str) -> None:
        """The job's pods' logs, as they are now, in a folder for a look at a restart that paused long."""
        folder = Path(tempfile.gettempdir()) / f"recovery-cost-{self.namespace}-{self.name}" / what
        folder.mkdir(parents=True, exist_ok=True)
        selector = f"{JOB_NAME_LABEL}={self.name}"
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
            try:
                log = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace, timestamps=True)
            except client.ApiException as error:
                log = f"(no log: {error.reason})"
            labels = pod.metadata.labels or {}
            header = (
                f"# {pod.metadata.name} attempt {labels.get(ATTEMPT_LABEL)} rank {labels.get(RANK_LABEL)}\n"
            )
            (folder / f"{pod.metadata.name}.log").write_text(header + (log or ""))
        print(f"[recovery_cost] {self.name} {what} paused long: its pods' logs in {folder}", flush=True)

    def holder(self, attempt: int, rank: int) -> str:
        """The pod that holds `rank` in `attempt` (a spare may, under its own name)."""
        selector = f"{JOB_NAME_LABEL}={self.name},{ATTEMPT_LABEL}={attempt},{RANK_LABEL}={rank}"
        (pod,) = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return str(pod.metadata.name)

    def spare_waiting(self) -> str | None:
        """A spare (not being deleted) whose trainer waits for a rank."""
        return next(iter(self.spares_waiting()), None)

    def spares_waiting(self) -> list[str]:
        """The spares (not being deleted) whose trainers wait for a rank."""
        selector = f"{JOB_NAME_LABEL}={self.name},{SPARE_LABEL}=true"
        waiting = []
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
            if pod.metadata.deletion_timestamp is not None:
                continue
            try:
                log = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace) or ""
                if "a hot spare: waiting for a rank" in log:
                    waiting.append(str(pod.metadata.name))
            except client.ApiException:  # not started yet
                pass
        return waiting


@contextlib.contextmanager
def operator_in_a_namespace(cluster: Cluster, prefix: str) -> Iterator[tuple[client.ApiClient, str]]:
    """The CRD applied and a fresh namespace, with the operator run in-process on it and its progress
    intake (status written every second); the namespace deleted after."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait(lambda: core.list_namespaced_service_account(namespace).items, "the default ServiceAccount")
    port = free_port()
    os.environ |= {"DTJOB_PROGRESS_PORT": str(port), "DTJOB_PROGRESS_URL": f"http://{NODE_IP}:{port}/v1/progress",
                   "DTJOB_PROGRESS_STATUS_SECONDS": "1"}  # fmt: skip
    try:
        with KopfRunner(["run", "--standalone", "--namespace", namespace, "-m", "dtjob.runtime"], timeout=60):
            yield api, namespace
    finally:
        core.delete_namespace(namespace)


def pause(cost: dict[str, Any], evicted_at: datetime) -> float:
    """The wall time from the eviction to the new attempt's first step, as the operator received its
    report (running + restore): the time the gang trained not at all, of which at most the step under
    way when the SIGTERM came was training (its ranks save where they stop). Unlike goodput's phases,
    it starts at the Eviction API call, not when the operator saw its effect; unlike the run's wall
    time against the uninterrupted run, it leaves out what other pods' start-up takes from the ranks'
    CPUs while they train."""
    first_step = parse_timestamp(cost["runningAt"]) + timedelta(seconds=float(cost["restoreSeconds"]))
    return (first_step - evicted_at).total_seconds()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preemptions", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=200, help="23 steps an epoch")
    parser.add_argument(
        "--strategies",
        default="Recreate,InPlace,InPlace+spare",
        help="runPolicy.restartStrategy in turn (+spare: with one hot spare)",
    )
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    strategies = args.strategies.split(",")

    cluster = Cluster()
    if cluster.running_tier() != Tier.C:
        cluster.up(Tier.C)
    images.ensure(cluster, images.TORCH_TRAINER)
    with operator_in_a_namespace(cluster, "recovery") as (api, namespace):
        # The first pods of a freshly imported image pay its unpacking on the node: not the runs' cost.
        Run(api, namespace, "warm-up", 1, "--min-accuracy", "0").train(0)
        plain = Run(api, namespace, "uninterrupted", args.epochs, workers=args.workers).train(0)
        spare_churn = None
        if SPARE in strategies:
            spare_churn = Run(
                api, namespace, "spare-churn", args.epochs, strategy=SPARE, workers=args.workers
            ).train(args.preemptions, spares_only=True)
        preempted = {
            strategy: Run(
                api,
                namespace,
                strategy.lower().replace("+", "-"),
                args.epochs,
                strategy=strategy,
                workers=args.workers,
            ).train(args.preemptions)
            for strategy in strategies
        }

    (plain_wall, _, plain_goodput, plain_weights) = plain
    print(f"{args.workers} workers; uninterrupted: wall time {plain_wall:.1f} s, goodput {plain_goodput.get('percent')}%, "
          f"weights sha256 {plain_weights[:16]}")  # fmt: skip
    lost = {}
    for strategy, (wall, costs, goodput, weights) in preempted.items():
        print(f"\n{strategy}, {args.preemptions} preemptions")
        print(
            f"{'restart':>8} "
            + " ".join(f"{p.removesuffix('Seconds'):>10}" for p in PHASES)
            + f" {'total':>8} {'pause':>8}"
        )
        for i, cost in enumerate(costs, start=1):
            cells = " ".join(f"{float(cost.get(p) or 0.0):10.2f}" for p in PHASES)
            print(f"{i:>8} {cells} {float(cost['totalSeconds']):8.2f} {cost['pauseSeconds']:8.2f}")
        totals = [float(c["totalSeconds"]) for c in costs]
        pauses = [c["pauseSeconds"] for c in costs]
        lost[strategy] = (wall - plain_wall) / args.preemptions
        same = "identical to" if weights == plain_weights else "DIFFERENT from"
        print(f"restart cost (goodput) median {statistics.median(totals):.2f} s, min {min(totals):.2f}, "
              f"max {max(totals):.2f}; training paused (eviction to the next attempt's first step) median "
              f"{statistics.median(pauses):.2f} s, max {max(pauses):.2f}; wall time {wall:.1f} s: "
              f"{lost[strategy]:.2f} s lost per preemption; goodput {goodput.get('percent')}%; "
              f"final weights {weights[:16]}, {same} uninterrupted")  # fmt: skip
        if strategy == SPARE and spare_churn is not None:
            churn_wall = spare_churn[0]
            print(f"no preemption, the waiting spare evicted {args.preemptions} times: wall time {churn_wall:.1f} s "
                  f"({(churn_wall - plain_wall) / args.preemptions:.2f} s a spare's start-up); against it, "
                  f"{(wall - churn_wall) / args.preemptions:.2f} s lost per preemption")  # fmt: skip
    if "Recreate" in lost:
        for strategy in lost.keys() - {"Recreate"}:
            print(
                f"\n{strategy} loses {lost[strategy] / lost['Recreate']:.2f}x what Recreate loses a preemption"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
