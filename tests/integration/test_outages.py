"""Control-plane outages while jobs run: the API server or etcd crashes and comes back, or the operator
alone is cut off from the API server. Jobs recover without intervention, no restart is counted twice,
the jobs nothing happened to are left alone, and a cut-off operator backs off instead of hammering.
The long variant (60 s outages, more jobs) is `python -m bench.outages`."""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client

from localcluster import Cluster, sim
from tests.integration.conftest import REPO, Jobs, pytorch_job
from tests.integration.test_fault_tolerance import gang_of_attempt, status_of

CALM = ["calm-0", "calm-1"]
# How long each outage lasts; `python -m bench.outages` sets 60.
OUTAGE_SECONDS = float(os.environ.get("DTJOB_OUTAGE_SECONDS", "0"))
# What each test measured, printed after them all (an in-process operator captures stdout while it runs).
FIGURES: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def print_figures() -> Iterator[None]:
    yield
    print("\n" + "\n".join(FIGURES))


def start_jobs(jobs: Jobs) -> dict[str, set[str]]:
    """Two calm jobs and one that will be preempted, all running; their pods' uids."""
    for name in [*CALM, "hit"]:
        jobs.create(pytorch_job(name, runPolicy={"failureSettleSeconds": 0}))
    return {name: {p.metadata.uid for p in gang_of_attempt(jobs, name, 1, 2)} for name in [*CALM, "hit"]}


def check_recovered(jobs: Jobs, core: client.CoreV1Api, namespace: str, uids: dict[str, set[str]]) -> None:
    """The hit job restarts exactly once, as a preemption; the calm ones keep their pods and attempt."""
    sim.preempt_pod(core, namespace, "hit-worker-1")
    gang_of_attempt(jobs, "hit", 2, 2, timeout=120)
    assert status_of(jobs, "hit")["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
    for name in CALM:
        assert {p.metadata.uid for p in jobs.pods(name)} == uids[name]
        assert (status_of(jobs, name)["attempt"], status_of(jobs, name)["restarts"]["total"]) == (1, 0)
    for name in [*CALM, "hit"]:
        # Rank 0 last: once it succeeds the job is done and the operator deletes the rest.
        sim.exit_pod(core, namespace, f"{name}-worker-1", exit_code=0)
        sim.exit_pod(core, namespace, f"{name}-worker-0", exit_code=0)
    for name in [*CALM, "hit"]:
        jobs.wait_condition(name, "Succeeded", timeout=60)
    assert status_of(jobs, "hit")["attempt"] == 2


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_jobs_ride_out_a_control_plane_crash_and_count_no_restart_twice(
    cluster_b: Cluster,
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    component: str,
) -> None:
    uids = start_jobs(jobs)
    down = OUTAGE_SECONDS or 5.0
    start = time.monotonic()
    cluster_b.restart_component(component, down_seconds=down)
    back = time.monotonic()
    check_recovered(jobs, core, namespace, uids)
    FIGURES.append(
        f"{component} down {down:.0f}s, serving again after {back - start:.1f}s; the preempted gang "
        f"restarted once and every job finished {time.monotonic() - back:.1f}s later"
    )


class Partition:
    """A TCP relay between the operator and the API server that can cut the link: while cut, it
    refuses every connection and drops the open ones, and counts the connections the operator tries."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.cut = threading.Event()
        self.attempts_while_cut = 0
        # On the API server's own address, so its certificate still names the host the operator dials.
        self._server = socket.create_server((upstream[0], 0))
        self.port = self._server.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()  # over cut, _open and the counter: a connection is in or refused
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                if self.cut.is_set():
                    self.attempts_while_cut += 1
                    downstream.close()
                    continue
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                downstream.close()
                continue
            with self._lock:
                if self.cut.is_set():  # cut while it connected: dropped like the rest
                    downstream.close()
                    upstream.close()
                    continue
                self._open |= {downstream, upstream}
            threading.Thread(target=self._relay, args=(downstream, upstream), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        """Both directions of one connection, in one thread that alone closes its sockets, after its
        last read: a descriptor closed under a pending read elsewhere could be reused by the next
        connection, and that read would then steal the next connection's bytes (a watch that hangs)."""
        peer = {a: b, b: a}
        with selectors.DefaultSelector() as selector, contextlib.suppress(OSError):
            for end in (a, b):
                selector.register(end, selectors.EVENT_READ, data=end)
            flowing = True
            while flowing:
                for ready, _ in selector.select():
                    source: socket.socket = ready.data
                    chunk = source.recv(65536)
                    if not chunk:  # one side closed (or the link was cut): the connection ends
                        flowing = False
                        break
                    peer[source].sendall(chunk)
        with self._lock:
            self._open -= {a, b}
        a.close()
        b.close()

    def sever(self) -> None:
        with self._lock:
            self.cut.set()
            for end in self._open:  # each relay thread sees its end and closes its sockets
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def heal(self) -> None:
        with self._lock:
            self.cut.clear()

    def close(self) -> None:
        self.sever()
        self._server.close()


@pytest.fixture
def partition(cluster_b: Cluster) -> Iterator[Partition]:
    server = yaml.safe_load(cluster_b.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    relay = Partition((host, int(port)))
    yield relay
    relay.close()


@contextlib.contextmanager
def operator_through(relay: Partition, cluster: Cluster, namespace: str, log: Path) -> Iterator[None]:
    """`dtjob run` in a process of its own whose kubeconfig dials the relay."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://{relay.upstream[0]}:{relay.port}"
    kubeconfig = log.with_suffix(".kubeconfig")
    kubeconfig.write_text(yaml.safe_dump(config))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
    env.pop("DTJOB_METRICS_PORT", None)
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "dtjob.cli", "run", "--namespace", namespace],
                                   cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield
    except BaseException:
        # pytest shows a failed test's output: the operator's own account of the outage.
        print("operator log (last 150 lines):\n" + "\n".join(log.read_text().splitlines()[-150:]))
        raise
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_an_operator_cut_off_from_the_api_server_backs_off_and_catches_up_when_the_link_returns(
    cluster_b: Cluster,
    crd: dict[str, Any],
    partition: Partition,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    with operator_through(partition, cluster_b, namespace, tmp_path / "operator.log"):
        uids = start_jobs(jobs)
        partition.sever()
        # While it is cut off the world moves on: a pod is preempted and a job is created.
        sim.preempt_pod(core, namespace, "hit-worker-1")
        jobs.create(pytorch_job("late"))
        outage = OUTAGE_SECONDS or 10.0
        time.sleep(outage)  # the outage's length is what is tested, not a wait for a state
        attempts = partition.attempts_while_cut
        partition.heal()
        gang_of_attempt(jobs, "hit", 2, 2, timeout=120)
        gang_of_attempt(jobs, "late", 1, 2, timeout=120)
        assert status_of(jobs, "hit")["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
        for name in CALM:
            assert {p.metadata.uid for p in jobs.pods(name)} == uids[name]
    FIGURES.append(
        f"operator cut off for {outage:.0f}s: {attempts} connection attempts ({attempts / outage:.1f}/s); "
        "it caught up with a preemption and a new job when the link came back"
    )
    # Kopf's watches (jobs, pods, Services, NetworkPolicies) and the node watch retry with pauses; the passes back off.
    assert attempts / outage < 10, f"{attempts} connection attempts in {outage:.0f}s: no back-off"
