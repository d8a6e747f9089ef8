"""Two operator replicas on one Lease: only the holder acts, and the standby takes over when it dies.

The election itself first, in-process with short timings (tier A); then two `dtjob run` processes on
kwok's fake GPU nodes (tier B), one of them SIGKILLed mid-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dtjob.kube.leader import Leadership
from localcluster import Cluster, sim
from tests.support.jobs import Jobs, pytorch_job
from tests.support.leader_election import LEASE, TAKEOVER_SECONDS, holder, replicas
from tests.support.relay import relay_kubeconfig, relay_to
from tests.support.waiting import wait_for


def test_one_of_two_candidates_leads_and_a_cancelled_leader_hands_over_at_once(
    cluster_a: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    api = client.CoordinationV1Api(api_client)
    timings = {"lease_seconds": 3.0, "renew_deadline_seconds": 2.0, "retry_seconds": 0.5}

    async def scenario() -> None:
        a, b = (Leadership(namespace, "election", who, **timings) for who in ("cand-a", "cand-b"))
        tasks = {a: asyncio.create_task(a.run()), b: asyncio.create_task(b.run())}
        try:
            await asyncio.wait_for(_first_set(a.acting, b.acting), timeout=10)
            leader, standby = (a, b) if a.acting.is_set() else (b, a)
            # Three renewals later the standby still stands by and the Lease still names the leader.
            before = await _renewed(api, namespace, times=3)
            assert before.holder_identity == leader.identity
            assert leader.acting.is_set() and not standby.acting.is_set()
            released_at = time.monotonic()
            tasks[leader].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tasks[leader]
            assert not leader.acting.is_set()
            await asyncio.wait_for(standby.acting.wait(), timeout=timings["lease_seconds"])
            # A released Lease is taken at the standby's next round, not after the Lease duration.
            assert time.monotonic() - released_at < timings["lease_seconds"]
            lease = await asyncio.to_thread(api.read_namespaced_lease, "election", namespace)
            assert lease.spec.holder_identity == standby.identity
            assert lease.spec.lease_transitions == before.lease_transitions + 1
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    asyncio.run(scenario())


def test_a_leader_that_finds_its_lease_taken_stops_acting_at_its_next_round(
    cluster_a: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    api = client.CoordinationV1Api(api_client)
    leadership = Leadership(
        namespace, "election", "cand-a", lease_seconds=3, renew_deadline_seconds=2, retry_seconds=0.5
    )

    async def scenario() -> None:
        task = asyncio.create_task(leadership.run())
        try:
            await asyncio.wait_for(leadership.acting.wait(), timeout=10)
            lease = await asyncio.to_thread(api.read_namespaced_lease, "election", namespace)
            lease.spec.holder_identity = "intruder"
            lease.spec.renew_time = datetime.now(UTC)
            await asyncio.to_thread(api.replace_namespaced_lease, "election", namespace, lease)
            lost = time.monotonic()
            while leadership.acting.is_set():
                assert time.monotonic() - lost < 2, "still acting 2 s after the Lease was taken"
                await asyncio.sleep(0.05)
            # It stands by: the intruder's Lease is left alone until it expires.
            assert await asyncio.to_thread(holder, api, namespace, "election") == "intruder"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


async def _renewed(api: client.CoordinationV1Api, namespace: str, times: int) -> Any:
    """Poll the Lease until its renewTime has moved `times` times; return its spec."""
    deadline = time.monotonic() + 10
    seen: set[Any] = set()
    while True:
        spec = (await asyncio.to_thread(api.read_namespaced_lease, "election", namespace)).spec
        seen.add(spec.renew_time)
        if len(seen) > times:
            return spec
        assert time.monotonic() < deadline, f"the Lease was renewed {len(seen) - 1} times in 10s"
        await asyncio.sleep(0.1)


async def _first_set(*events: asyncio.Event) -> None:
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def pod_uids(jobs: Jobs, name: str) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in jobs.pods(name)}


# A takeover within seconds of a 10 s Lease: a margin of ~3 s that a loaded machine eats.
@pytest.mark.cluster_wide
@pytest.mark.quiet
def test_only_the_lease_holder_acts_and_its_standby_takes_over_within_seconds_of_its_death(
    cluster_b: Cluster,
    crd: dict[str, Any],
    namespace: str,
    jobs: Jobs,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    leases = client.CoordinationV1Api(api_client)
    with replicas(namespace, tmp_path, "op-a", "op-b") as running:

        def logs() -> str:
            return "".join(f"\n--- {r.identity} ---\n{r.log()[-3000:]}" for r in running.values())

        leader_name = wait_for(lambda: holder(leases, namespace), "a holder of the Lease", timeout=60)
        leader = running[leader_name]
        standby = next(r for r in running.values() if r is not leader)
        wait_for(
            lambda: f"standing by: lease held by {leader.identity}" in standby.log(),
            f"the standby to stand by{logs()}",
        )

        jobs.create(pytorch_job("first", workers=2))
        first = jobs.wait_pods("first", 2, phase="Running")
        jobs.wait_condition("first", "Running")
        uids = {p.metadata.name: p.metadata.uid for p in first}
        assert "acquired leadership" in leader.log()
        assert "acquired leadership" not in standby.log(), logs()
        assert leader.process.poll() is None and standby.process.poll() is None, logs()

        leader.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        leader.process.wait()
        jobs.create(pytorch_job("second", workers=2))

        def left() -> float:
            return max(0.1, TAKEOVER_SECONDS - (time.monotonic() - killed))

        wait_for(
            lambda: holder(leases, namespace) == standby.identity,
            f"the standby's takeover{logs()}",
            timeout=left(),
        )
        jobs.wait_pods("second", 2, timeout=left())
        took = time.monotonic() - killed
        assert took <= TAKEOVER_SECONDS, f"the second job's pods came {took:.1f}s after the kill"
        assert f"acquired leadership (lease {namespace}/{LEASE})" in standby.log()

        # The first job is the new leader's too: nothing of it was recreated, and it still reacts.
        assert pod_uids(jobs, "first") == uids
        assert jobs.get("first")["status"]["phase"] == "Running"
        sim.exit_pod(core, namespace, "first-worker-0", exit_code=0)
        jobs.wait_condition("first", "Succeeded")
        assert "Traceback" not in standby.log(), logs()


def writes_by(cluster: Cluster, namespace: str, identity: str) -> list[dict[str, Any]]:
    """The writes the apiserver's audit log holds from the replica `identity` in `namespace`."""
    entries = [json.loads(line) for line in cluster.layout.audit_log.read_text().splitlines() if line]
    return [
        e for e in entries
        if e.get("objectRef", {}).get("namespace") == namespace and f"({identity})" in e.get("userAgent", "")
    ]  # fmt: skip


def test_a_partitioned_leader_writes_nothing_once_its_standby_has_taken_over(
    cluster_b: Cluster,
    crd: dict[str, Any],
    namespace: str,
    jobs: Jobs,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    tmp_path: Path,
) -> None:
    """The leader is cut off from the apiserver (not killed) while it has writes queued behind its rate
    limit; the standby takes over, and the link comes back. The old leader's queued writes must not land:
    every write looks at the Lease first. The apiserver's audit log is the witness (the operator's user
    agent names its replica)."""
    leases = client.CoordinationV1Api(api_client)
    relay = relay_to(cluster_b)
    # A write every 4 s: with eight jobs to start, op-a's passes queue for tokens well past the takeover.
    slow = {"DTJOB_API_QPS": "0.25", "DTJOB_API_BURST": "1"}
    through = relay_kubeconfig(relay, cluster_b, tmp_path / "relay.kubeconfig")
    names = [f"p{i}" for i in range(8)]
    with contextlib.ExitStack() as stack:
        stack.callback(relay.close)
        old = stack.enter_context(replicas(namespace, tmp_path, "op-a", KUBECONFIG=str(through), **slow))[
            "op-a"
        ]
        wait_for(lambda: holder(leases, namespace) == "op-a", "op-a to lead", timeout=60)
        new = stack.enter_context(replicas(namespace, tmp_path, "op-b"))["op-b"]
        wait_for(lambda: "standing by: lease held by op-a" in new.log(), "op-b to stand by")

        for name in names:
            jobs.create(pytorch_job(name, workers=2, runPolicy={"failureSettleSeconds": 0}))
        wait_for(lambda: writes_by(cluster_b, namespace, "op-a"), "op-a's first write", timeout=60)
        relay.sever()
        wait_for(
            lambda: holder(leases, namespace) == "op-b", "op-b's takeover", timeout=TAKEOVER_SECONDS + 10
        )
        took_over = leases.read_namespaced_lease(LEASE, namespace).spec.acquire_time
        relay.heal()
        for name in names:
            jobs.wait_pods(name, 2, phase="Running", timeout=60)
        sim.preempt_pod(core, namespace, "p0-worker-1")
        wait_for(lambda: jobs.get("p0").get("status", {}).get("attempt") == 2, "p0's restart")

        # Long enough for every write op-a had queued (one token each 4 s, eight passes) to be sent.
        window = time.monotonic() + 20
        while time.monotonic() < window:
            late = [
                f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('name')} at "
                f"{e['requestReceivedTimestamp']}"
                for e in writes_by(cluster_b, namespace, "op-a")
                if datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")) > took_over
            ]
            assert not late, f"op-a wrote after op-b took over at {took_over}: {late}"
            time.sleep(0.5)  # a poll of the audit log over the window
        assert old.process.poll() is None, old.log()[-3000:]
        assert "no longer leads" in old.log(), (
            "op-a had no write queued across the takeover: nothing was tested"
        )

        gang = jobs.wait_pods("p0", 2, phase="Running", timeout=60)
        assert {p.metadata.labels["training.dtjob.io/attempt"] for p in gang} == {"2"}
        assert jobs.get("p0")["status"]["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
