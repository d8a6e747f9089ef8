"""Control-plane outages while jobs run: the API server or etcd crashes and comes back, or the operator
alone is cut off from the API server. Jobs recover without intervention, no restart is counted twice,
the jobs nothing happened to are left alone, and a cut-off operator backs off instead of hammering.
The long variant (60 s outages, more jobs) is `python -m bench.outages`."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client

from localcluster import Cluster, sim
from tests.support.jobs import Jobs, gang_of_attempt, pytorch_job, status_of
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.relay import Partition, relay_kubeconfig, relay_to
from tests.support.waiting import wait_for

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


# Kills the apiserver or etcd under every test.
@pytest.mark.cluster_wide
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


@pytest.fixture
def partition(cluster_b: Cluster) -> Iterator[Partition]:
    relay = relay_to(cluster_b)
    yield relay
    relay.close()


@contextlib.contextmanager
def operator_through(
    relay: Partition, cluster: Cluster, namespace: str, log: Path, **settings: str
) -> Iterator[None]:
    """`dtjob run` in a process of its own whose kubeconfig dials the relay; `settings`, its environment's
    DTJOB_ variables (no metrics port unless named)."""
    kubeconfig = relay_kubeconfig(relay, cluster, log.with_suffix(".kubeconfig"))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
    env.pop("DTJOB_METRICS_PORT", None)
    env.update(settings)
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


def test_an_operator_started_while_the_api_server_is_away_acts_on_jobs_once_it_answers(
    cluster_b: Cluster, crd: dict[str, Any], partition: Partition, jobs: Jobs, namespace: str, tmp_path: Path
) -> None:
    """Started cut off (a control-plane upgrade, a pod whose network is not up yet), as the chart runs it:
    metrics and progress intake on their ports. Its start-up's CRD check fails; it looks again until the
    API server answers, then acts. (Raised out of the start-up hook, Kopf ran the hook again a minute
    later, which met the ports its first run had bound and failed so for ever: the operator never acted.)"""
    log = tmp_path / "operator.log"
    ports = {"DTJOB_METRICS_PORT": str(free_port()), "DTJOB_PROGRESS_PORT": str(free_port())}
    partition.sever()
    with operator_through(partition, cluster_b, namespace, log, **ports):
        # Its start-up has met the cut (in whatever words it says so), not only dialled once.
        wait_for(lambda: re.search(START_UP_FAILED, log.read_text()), "the start-up to fail on the cut link")
        partition.heal()
        jobs.create(pytorch_job("late"))
        gang_of_attempt(jobs, "late", 1, 2, timeout=90)
        assert "address already in use" not in log.read_text()


# The operator's words for a start-up that met an API server away, and Kopf's for a start-up hook that raised.
START_UP_FAILED = r"could not check the CRD|Activity 'configure' failed"


# Kills the apiserver under every test.
@pytest.mark.cluster_wide
def test_a_pod_and_a_job_deleted_while_the_operator_is_cut_off_are_seen_gone(
    cluster_b: Cluster,
    crd: dict[str, Any],
    partition: Partition,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    """While the operator is cut off, a member's pod and a whole job are deleted: no watch will ever
    deliver those DELETED events, and the apiserver restarts meanwhile, so a watch resumed from before
    the gap gets 410 Gone. The readers list again after any break (a lost connection or a 410), and a
    listing replaces what was known: the job with the lost member restarts (a cache
    keeping the pod would wait on it for ever), and the deleted job's loop ends."""
    log = tmp_path / "operator.log"
    with operator_through(partition, cluster_b, namespace, log):
        for name in ("hit", "gone"):
            jobs.create(pytorch_job(name, runPolicy={"failureSettleSeconds": 0}))
            gang_of_attempt(jobs, name, 1, 2)
        partition.sever()
        core.delete_namespaced_pod(
            "hit-worker-1", namespace, body=client.V1DeleteOptions(grace_period_seconds=0)
        )
        jobs.delete("gone")
        wait_for(lambda: jobs.pods("gone") == [] or None, "the deleted job's pods collected")
        # Its watch cache starts afresh at the current revision: a watch resumed from before is 410 Gone.
        cluster_b.restart_component("kube-apiserver", down_seconds=2)
        partition.heal()
        gang_of_attempt(jobs, "hit", 2, 2, timeout=120)
        # Deleted by hand: a failure, charged once.
        assert status_of(jobs, "hit")["restarts"] == {"failures": 1, "preemptions": 0, "total": 1}
        wait_for(
            lambda: f"job {namespace}/gone is deleted" in log.read_text(), "the deleted job's loop ended"
        )
        sim.exit_pod(core, namespace, "hit-worker-1", exit_code=0)
        sim.exit_pod(core, namespace, "hit-worker-0", exit_code=0)
        jobs.wait_condition("hit", "Succeeded", timeout=60)
