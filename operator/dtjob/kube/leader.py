"""Leader election over a coordination.k8s.io/v1 Lease, so that two operator replicas never both act.

`Leadership.run()` tries to take the Lease every `retry_seconds`; while it holds it, it renews it as
often. `acting` is set while this process holds the Lease and cleared as soon as no renewal has
succeeded for `renew_deadline_seconds`, which is shorter than the `lease_seconds` a standby waits
(on its own clock) before it takes over: the old leader has stopped before the new one starts.
The decisions are pure (`dtjob.election`); this module does the I/O and keeps the time.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client

from dtjob.election import LeaseRecord, Sighting, Verdict, claimed, judge, released
from dtjob.kube.client import coordination

LEASE_ENV = "DTJOB_LEADER_ELECTION_LEASE"
NAMESPACE_ENV = "DTJOB_LEADER_ELECTION_NAMESPACE"
IDENTITY_ENV = "POD_NAME"
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

log = logging.getLogger(__name__)
T = TypeVar("T")


class Leadership:
    def __init__(
        self,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: float = 10.0,
        renew_deadline_seconds: float = 7.0,
        retry_seconds: float = 2.0,
    ) -> None:
        if not retry_seconds < renew_deadline_seconds < lease_seconds:
            raise ValueError("leader election needs retry < renew deadline < lease duration")
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds = lease_seconds
        self.renew_deadline_seconds = renew_deadline_seconds
        self.retry_seconds = retry_seconds
        self.acting = asyncio.Event()
        self._last: Sighting | None = None  # the record last read, and when (monotonic) it was first seen
        self._renewed_at = 0.0  # monotonic time at which the last successful write as holder was sent
        self._standing_by_for: str | None = None  # the holder last logged, so each is logged once
        self._threads: ThreadPoolExecutor | None = None

    def write_window(self) -> float:
        """The seconds this process may still write in: to its renew deadline while it holds the Lease (a
        standby takes over `lease_seconds` after it sees the last renewal, later still: the gap is the margin
        a write's way to the apiserver and its commit take), else none. Safe to call from any thread (the
        pass threads ask before each write: the gate's fence)."""
        return self._deadline() - time.monotonic() if self.acting.is_set() else 0.0

    @property
    def lease(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def run(self) -> None:
        """Forever: stand by or lead. On cancellation, release the Lease if we hold it, then re-raise."""
        # Our own threads: a Lease call never queues behind reconcile passes in the default executor.
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dtjob-leader")
        try:
            while True:
                if self.acting.is_set():
                    await self._lead_round()
                else:
                    await self._stand_by_round()
                await asyncio.sleep(self._pause())
        except asyncio.CancelledError:
            if self.acting.is_set():
                self.acting.clear()
                await self._release()
            raise
        finally:
            self._threads.shutdown(wait=False)
            self._threads = None

    def _pause(self) -> float:
        """Until the next round: retry_seconds, but a leader wakes up at its renew deadline at the latest."""
        if not self.acting.is_set():
            return self.retry_seconds
        return max(0.0, min(self.retry_seconds, self._deadline() - time.monotonic()))

    def _deadline(self) -> float:
        return self._renewed_at + self.renew_deadline_seconds

    async def _stand_by_round(self) -> None:
        try:
            holder = await self._try(self.renew_deadline_seconds)
        except Exception as err:  # the apiserver is unreachable, we lack RBAC, ...: try again next round
            log.warning("leader election on lease %s failed: %s", self.lease, err)
            return
        if holder == self.identity:
            self._standing_by_for = None
            self.acting.set()
            log.info("acquired leadership (lease %s)", self.lease)
        elif holder and holder != self._standing_by_for:
            self._standing_by_for = holder
            log.info("standing by: lease held by %s", holder)

    async def _lead_round(self) -> None:
        remaining = self._deadline() - time.monotonic()
        holder: str | None = None
        if remaining > 0:
            try:
                async with asyncio.timeout(remaining):
                    holder = await self._try(remaining)
            except Exception as err:  # includes TimeoutError: this round did not renew
                log.warning("renewing lease %s failed: %s", self.lease, err)
        if holder is not None and holder != self.identity:
            self._lose(f"lease {self.lease} is now held by {holder or 'nobody'}")
        elif time.monotonic() >= self._deadline():
            self._lose(f"no renewal of lease {self.lease} for {self.renew_deadline_seconds:g}s")

    def _lose(self, why: str) -> None:
        self.acting.clear()
        log.info("lost leadership: %s", why)

    async def _try(self, timeout: float) -> str | None:
        """One round of read, judge and write. Returns who holds the Lease after it: our identity when
        we do, "" when nobody does, None when our write lost a race (we learn more next round)."""
        started = time.monotonic()
        lease = await self._call(_read, self.namespace, self.name, timeout)
        now = datetime.now(UTC)
        if lease is None:
            spec = claimed(None, self.identity, self.lease_seconds, now)
            if not await self._call(_create, self.namespace, self.name, spec, timeout):
                return None  # another candidate created it first: read it next round
            self._renewed_at = started
            return self.identity
        spec = lease.get("spec") or {}
        record = LeaseRecord.of(spec, self.lease_seconds)
        verdict, self._last = judge(record, self._last, time.monotonic(), self.identity)
        if verdict is Verdict.WAIT or (self.acting.is_set() and verdict is Verdict.ACQUIRE):
            return record.holder  # someone else's, or "" for a leader that finds the Lease freed: lost
        body = _with_spec(lease, claimed(spec, self.identity, self.lease_seconds, now))
        if not await self._call(_replace, self.namespace, self.name, body, timeout):
            return None  # 409: someone wrote it since we read it
        self._renewed_at = started
        return self.identity

    async def _release(self) -> None:
        """Hand the Lease back (best effort, a few seconds at most): the standby takes over at once."""
        timeout = self.retry_seconds
        try:
            async with asyncio.timeout(timeout * 2):
                lease = await self._call(_read, self.namespace, self.name, timeout)
                if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                    return
                body = _with_spec(lease, released(lease["spec"], datetime.now(UTC)))
                if await self._call(_replace, self.namespace, self.name, body, timeout):
                    log.info("released lease %s", self.lease)
        except Exception as err:  # the standby takes over when the Lease expires instead
            log.warning("could not release lease %s: %s", self.lease, err)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._threads, functools.partial(fn, *args))


def _with_spec(lease: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The Lease to write back: its name and resourceVersion (optimistic concurrency) and the new spec."""
    return {**lease, "spec": spec}


def _read(namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
    try:
        # Plain JSON, not a V1Lease: times stay the strings the election compares.
        response: Any = coordination().read_namespaced_lease(
            name, namespace, _preload_content=False, _request_timeout=timeout
        )
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    lease: dict[str, Any] = json.loads(response.data)
    return lease


def _create(namespace: str, name: str, spec: dict[str, Any], timeout: float) -> bool:
    body: Any = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": spec,
    }
    try:
        coordination().create_namespaced_lease(  # the client sends dict bodies as they are
            namespace, body, _preload_content=False, _request_timeout=timeout
        )
    except client.ApiException as err:
        if err.status == 409:
            return False
        raise
    return True


def _replace(namespace: str, name: str, lease: dict[str, Any], timeout: float) -> bool:
    body: Any = lease
    try:
        coordination().replace_namespaced_lease(
            name, namespace, body, _preload_content=False, _request_timeout=timeout
        )
    except client.ApiException as err:
        if err.status == 409:
            return False
        raise
    return True


def from_env(environ: Mapping[str, str] | None = None) -> Leadership | None:
    """The Leadership the environment asks for, or None: no DTJOB_LEADER_ELECTION_LEASE, no election."""
    env = os.environ if environ is None else environ
    name = env.get(LEASE_ENV)
    if not name:
        return None
    namespace = env.get(NAMESPACE_ENV) or _in_cluster_namespace() or "default"
    identity = env.get(IDENTITY_ENV) or f"{socket.gethostname()}-{os.getpid()}"  # as client.identity()
    return Leadership(namespace, name, identity)


def _in_cluster_namespace() -> str | None:
    try:
        return IN_CLUSTER_NAMESPACE_FILE.read_text().strip() or None
    except OSError:
        return None
