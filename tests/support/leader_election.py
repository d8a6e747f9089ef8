"""Operator replicas on one Lease: `dtjob run` processes as the chart runs them, and the Lease's holder."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kubernetes import client

from tests.support.paths import REPO

LEASE = "dtjob-test"
# A killed leader's Lease expires 10 s after the standby last saw it change; the standby looks every 2 s.
TAKEOVER_SECONDS = 15.0


def holder(api: client.CoordinationV1Api, namespace: str, name: str = LEASE) -> str | None:
    try:
        lease = api.read_namespaced_lease(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return lease.spec.holder_identity or None


class Replica:
    """One `dtjob run` process, as the chart runs it: its own identity, the shared Lease, a log file."""

    def __init__(self, identity: str, namespace: str, logs: Path, **extra_env: str) -> None:
        self.identity, self.log_path = identity, logs / f"{identity}.log"
        env = {
            **os.environ,
            "DTJOB_LEADER_ELECTION_LEASE": LEASE,
            "DTJOB_LEADER_ELECTION_NAMESPACE": namespace,
            "POD_NAME": identity,
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
        env.pop("DTJOB_METRICS_PORT", None)  # two processes on one port would clash
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dtjob.cli", "run", "--namespace", namespace],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def replicas(namespace: str, logs: Path, *identities: str, **env: str) -> Iterator[dict[str, Replica]]:
    started: dict[str, Replica] = {}
    try:
        for identity in identities:
            started[identity] = Replica(identity, namespace, logs, **env)
        yield started
    finally:
        for replica in started.values():
            replica.stop()
