"""Operator chaos: jobs live planned lives while the operator is taken away again and again.

One replica is SIGKILLed. Of two (leader election on), the Lease holder is taken away in turn in each
way a cluster takes one: SIGKILL (OOM, a lost node), SIGTERM with a graceful shutdown (a rollout, a
force-deleted pod), and a partition (its link to the API server cut while it runs; it comes back as the
standby once the other has taken over). One life is an elastic gang's: a member replaced alone.

Shared by tests/integration/test_chaos.py (a short run in the suite) and `python -m bench.chaos` (the
long one, with figures). Every job's life is a plan: what happens to it, and the phase, attempt and
restart counters it must end with. A watch records every pod ever created, so a pod created twice for
one (job, attempt, role, index) shows even if it was deleted again.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes import client, watch

from dtjob.core.names import ATTEMPT_LABEL, JOB_NAME_LABEL, REPLICA_INDEX_LABEL, ROLE_LABEL
from localcluster import Cluster, sim
from tests.support.jobs import Jobs, gang_of_attempt, pytorch_job, status_of
from tests.support.paths import REPO
from tests.support.relay import Partition, relay_kubeconfig, relay_to
from tests.support.waiting import wait_for

LEASE = "dtjob-chaos"
# The lives: (phase at the end, attempt at the end, failures, preemptions, replacements); None: the job
# is deleted.
LIVES: dict[str, tuple[str, int, int, int, int] | None] = {
    "clean": ("Succeeded", 1, 0, 0, 0),
    # Succeeds under cleanPodPolicy All: its pods go once the success is recorded, and a leader lost in
    # between must not take rank 0's deleted pod for a vanished member.
    "cleaned": ("Succeeded", 1, 0, 0, 0),
    "preempted": ("Succeeded", 2, 0, 1, 0),
    "failed": ("Failed", 1, 0, 0, 0),
    "suspended": ("Succeeded", 2, 0, 0, 0),  # a suspension moves the gang to the next attempt
    "deleted": None,
    # An elastic gang (spec.torch.elastic) of 3 Workers, at least 2: its preempted Worker 2 is replaced
    # alone, in the same attempt, which is the one member that may have two pods.
    "elastic": ("Succeeded", 1, 0, 0, 1),
}
ELASTIC_LOST: Final = ("Worker", "2")


def seed_of_this_run() -> int:
    """DTJOB_CHAOS_SEED to run a storm again, else a new one (print it: a failure names its storm)."""
    return int(os.environ.get("DTJOB_CHAOS_SEED") or random.SystemRandom().randrange(1_000_000))


def gang_size(life: str) -> int:
    return 3 if life == "elastic" else 2


# The ways a cluster takes a leader away, taken in turn with two replicas.
WAYS = ("SIGKILL", "SIGTERM", "partition")


@dataclass
class Chaos:
    """`replicas` `dtjob run` processes (two: leader election on, sharing a Lease), one taken away at
    random intervals `kills` times: the only one (SIGKILL, started again at once), or the Lease holder of
    two, in each of `WAYS` in turn (a process that ended is replaced under a new name)."""

    namespace: str
    log_dir: Path
    kills: int
    seed: int = 0
    replicas: int = 1
    interval: tuple[float, float] = (1.0, 4.0)
    cluster: Cluster | None = None
    """Given, each replica dials the API server through a relay of its own, which a partition cuts."""
    killed: int = 0
    ways: list[str] = field(default_factory=list)
    """How each leader was taken away, in order."""
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _relays: dict[str, Partition] = field(default_factory=dict)
    _done: threading.Event = field(default_factory=threading.Event)

    def _start(self, identity: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("DTJOB_METRICS_PORT", None)
        if self.replicas > 1:
            env |= {"DTJOB_LEADER_ELECTION_LEASE": LEASE, "DTJOB_LEADER_ELECTION_NAMESPACE": self.namespace,
                    "POD_NAME": identity}  # fmt: skip
        if self.cluster is not None:
            relay = self._relays[identity] = relay_to(self.cluster)
            env["KUBECONFIG"] = str(
                relay_kubeconfig(relay, self.cluster, self.log_dir / f"{identity}.kubeconfig")
            )
        with (self.log_dir / f"{identity}-{self.killed}.log").open("w") as log:
            self._processes[identity] = subprocess.Popen(
                [sys.executable, "-m", "dtjob.cli", "run", "--namespace", self.namespace],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def _holder(self, leases: client.CoordinationV1Api) -> str | None:
        """The live replica that holds the Lease, if one does."""
        with contextlib.suppress(client.ApiException):
            holder = leases.read_namespaced_lease(LEASE, self.namespace).spec.holder_identity
            if holder in self._processes and self._processes[holder].poll() is None:
                return str(holder)
        return None

    def _run(self, leases: client.CoordinationV1Api) -> None:
        pick = random.Random(self.seed)
        for index in range(self.replicas):
            self._start(f"replica-{index}")
        while self.killed < self.kills and not self._done.is_set():
            self._done.wait(pick.uniform(*self.interval))  # chaos: the timing is the point
            victim = next(iter(self._processes))
            if self.replicas > 1:  # the leader: once the standby has taken over from the last one killed
                victim = wait_for(lambda: self._holder(leases), "a live Lease holder", timeout=60)
            way = WAYS[self.killed % len(WAYS)] if self.replicas > 1 else "SIGKILL"
            if way == "partition" and victim in self._relays:
                self._partition(leases, victim)
            else:
                way = "SIGTERM" if way == "SIGTERM" else "SIGKILL"
                self._stop(victim, signal.SIGTERM if way == "SIGTERM" else signal.SIGKILL)
            self.ways.append(way)
            self.killed += 1
            if victim not in self._processes:
                # A Deployment's new pod has a new name: the standby, not the new pod, takes the Lease over.
                self._start(f"replica-{self.replicas - 1 + self.killed}" if self.replicas > 1 else victim)

    def _stop(self, victim: str, how: signal.Signals) -> None:
        process = self._processes.pop(victim)
        process.send_signal(how)
        process.wait(timeout=60)  # a graceful stop releases the Lease on its way out
        if (relay := self._relays.pop(victim, None)) is not None:
            relay.close()

    def _partition(self, leases: client.CoordinationV1Api, victim: str) -> None:
        """Cut the leader off until another replica holds the Lease; it stays up and stands by after."""
        relay = self._relays[victim]
        relay.sever()
        try:
            wait_for(
                lambda: (h := self._holder(leases)) not in (None, victim) and h, "a takeover", timeout=60
            )
        finally:
            relay.heal()

    def next_kill(self, count: int = 1) -> None:
        """Until the operator has been killed `count` more times (or all kills are done)."""
        target = min(self.killed + count, self.kills)
        wait_for(lambda: self.killed >= target or None, f"operator kill {target}", timeout=60)

    @contextlib.contextmanager
    def running(self, leases: client.CoordinationV1Api) -> Iterator[Chaos]:
        thread = threading.Thread(target=self._run, args=(leases,), name="chaos", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._done.set()
            thread.join()
            for process in self._processes.values():
                if process.poll() is None:
                    process.terminate()
                    process.wait(timeout=20)
            for relay in self._relays.values():
                relay.close()


class PodLedger:
    """Every pod the job's watch shows, by (job, attempt, role, index): their uids (a hot spare's once it
    took a member's place)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.uids: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
        self._core, self._namespace = core, namespace
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._watch, name="pod ledger", daemon=True)

    def _watch(self) -> None:
        version = None
        try:
            while not self._stop.is_set():
                stream = watch.Watch().stream(
                    self._core.list_namespaced_pod, self._namespace, label_selector=JOB_NAME_LABEL,
                    resource_version=version, timeout_seconds=2,
                )  # fmt: skip
                for event in stream:
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    labels = pod.metadata.labels or {}
                    if ATTEMPT_LABEL not in labels:  # a hot spare: recorded once it takes a rank
                        continue
                    key = (
                        labels[JOB_NAME_LABEL],
                        labels[ATTEMPT_LABEL],
                        labels[ROLE_LABEL],
                        labels[REPLICA_INDEX_LABEL],
                    )
                    self.uids[key].add(pod.metadata.uid)
        except BaseException as err:  # a gap in the ledger could hide a pod created twice: say so
            self.error = err
            raise

    @contextlib.contextmanager
    def recording(self) -> Iterator[PodLedger]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()

    def seen(self) -> dict[tuple[str, str, str, str], set[str]]:
        """What the ledger recorded; raises if its watch died (it saw nothing since)."""
        if self.error is not None or (not self._thread.is_alive() and not self._stop.is_set()):
            raise AssertionError(f"the pod ledger's watch died: {self.error!r}") from self.error
        return dict(self.uids)

    def twice(self, names: dict[str, str]) -> dict[tuple[str, str, str, str], set[str]]:
        """The members that had more pods than their job's life (name -> life) plans: one each, and an
        elastic job's lost member one more per replacement; raises if the ledger's watch died."""
        return {key: uids for key, uids in self.seen().items() if len(uids) > _planned_pods(key, names)}


def _planned_pods(key: tuple[str, str, str, str], names: dict[str, str]) -> int:
    planned = LIVES[names[key[0]]]
    return 1 + planned[4] if planned is not None and key[2:] == ELASTIC_LOST else 1


def live(
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    names: dict[str, str],
    timeout: float,
    between: Callable[[], None] = lambda: None,
) -> None:
    """Drive each job (name -> life) through its life; every step waits for the state it needs, and
    `between` runs between the phases (the chaos waits for its next kill there)."""
    for name, life in names.items():
        policy = "Never" if life == "failed" else "OnFailure"
        elastic = {"torch": {"elastic": {"minReplicas": 2}}} if life == "elastic" else {}
        cleaned = {"cleanPodPolicy": "All"} if life == "cleaned" else {}
        jobs.create(pytorch_job(name, workers=gang_size(life), **elastic,
                                runPolicy={"failureSettleSeconds": 0, "restartPolicy": policy, **cleaned}))  # fmt: skip
    between()
    for name, life in names.items():
        gang_of_attempt(jobs, name, 1, gang_size(life), timeout=timeout)
    between()
    steps: dict[str, Callable[[str], None]] = {
        "preempted": lambda n: sim.preempt_pod(core, namespace, f"{n}-worker-1"),
        "elastic": lambda n: sim.preempt_pod(core, namespace, f"{n}-worker-{ELASTIC_LOST[1]}"),
        "failed": lambda n: sim.exit_pod(core, namespace, f"{n}-worker-0", exit_code=1),
        "suspended": lambda n: jobs.patch(n, {"spec": {"runPolicy": {"suspend": True}}}),
        "deleted": jobs.delete,
    }
    for name, life in names.items():
        if life in steps:
            steps[life](name)
    between()
    for name, life in names.items():
        if life == "suspended":
            jobs.wait_condition(name, "Suspended", timeout=timeout)
            wait_for(lambda n=name: jobs.pods(n) == [] or None, f"{name}'s pods gone", timeout=timeout)
            jobs.patch(name, {"spec": {"runPolicy": {"suspend": False}}})
    between()
    for name, life in names.items():
        planned = LIVES[life]
        if planned is None or planned[0] != "Succeeded":
            continue
        # Rank 0 last, as a gang ends: once it succeeds the job is done and the operator deletes the rest.
        for pod in reversed(gang_of_attempt(jobs, name, planned[1], gang_size(life), timeout=timeout)):
            sim.exit_pod(core, namespace, pod.metadata.name, exit_code=0)


def outcome(jobs: Jobs, names: dict[str, str], timeout: float) -> dict[str, Any]:
    """Each job's end, once it has one, against its plan: {name: (planned, got)} for the ones that differ."""
    wrong = {}
    for name, life in names.items():
        planned = LIVES[life]
        if planned is None:
            wait_for(lambda n=name: _gone(jobs, n), f"{name} deleted", timeout=timeout)
            wait_for(lambda n=name: jobs.pods(n) == [] or None, f"{name}'s pods collected", timeout=timeout)
            continue
        jobs.wait_condition(name, planned[0], timeout=timeout)
        status = status_of(jobs, name)
        restarts = status.get("restarts") or {}
        got = (
            status["phase"],
            status["attempt"],
            restarts.get("failures", 0),
            restarts.get("preemptions", 0),
            restarts.get("replacements", 0),
        )
        if got != planned:
            wrong[name] = (planned, got)
    return wrong


def _gone(jobs: Jobs, name: str) -> bool | None:
    try:
        jobs.get(name)
    except client.ApiException as err:
        if err.status == 404:
            return True
        raise
    return None


def left_behind(jobs: Jobs, names: dict[str, str]) -> list[str]:
    """Pods that should not be there once every job ended: of an attempt that is not the job's last, or
    still running or pending."""
    stray = []
    for name, life in names.items():
        if LIVES[life] is None:
            continue
        attempt = str(status_of(jobs, name)["attempt"])
        stray += [p.metadata.name for p in jobs.pods(name)
                  if p.metadata.labels[ATTEMPT_LABEL] != attempt or p.status.phase in ("Running", "Pending")]  # fmt: skip
    return stray
