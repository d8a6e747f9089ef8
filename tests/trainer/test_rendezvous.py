"""Rank 0 may come up after the others, or not at all: the runtime waits, then fails clearly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dtjob_trainer.environment import TorchRendezvous
from dtjob_trainer.pytorch.distributed import init_distributed
from dtjob_trainer.reachability import RendezvousTimeout

from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.waiting import wait_for


def start_probe(rank: int, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": "2",
        "RANK": str(rank),
        "DTJ_RENDEZVOUS_TIMEOUT_SECONDS": "120",
    }
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.trainer.rendezvous_probe"],
            env=env,
            stdout=log,
            stderr=log,
            cwd=REPO,
        )


def test_rank_started_before_rank_zero_listens_still_joins(tmp_path: Path) -> None:
    port = free_port()
    logs = [tmp_path / "rank0.log", tmp_path / "rank1.log"]
    rank1 = start_probe(1, port, logs[1])
    rank0: subprocess.Popen[bytes] | None = None
    try:
        # Rank 1 has tried rank 0's port and found it closed before rank 0 exists at all.
        wait_for(lambda: "waiting for rank 0" in logs[1].read_text(), "rank 1 waiting for rank 0", timeout=60)
        assert rank1.poll() is None
        rank0 = start_probe(0, port, logs[0])
        assert rank0.wait(timeout=120) == 0, logs[0].read_text()
        assert rank1.wait(timeout=120) == 0, logs[1].read_text()
    finally:
        for process in (rank0, rank1):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    results = [json.loads(log.read_text().splitlines()[-1]) for log in logs]
    assert [result["sum"] for result in results] == [3.0, 3.0]


@pytest.mark.parametrize(
    ("host", "rank", "failure"),
    [
        pytest.param(
            "rank0.dtjob-test.invalid", 0, "could not resolve", id="rank 0's DNS name never resolves"
        ),
        pytest.param("127.0.0.1", 1, "could not connect to", id="rank 0's port never opens"),
    ],
)
def test_unreachable_rank_zero_fails_with_a_clear_error_at_the_deadline(
    host: str, rank: int, failure: str
) -> None:
    port = free_port()
    deadline_s = 1.5
    started = time.monotonic()
    with pytest.raises(RendezvousTimeout) as raised:
        init_distributed(TorchRendezvous(host, port, world_size=2, rank=rank, local_rank=0), deadline_s)
    elapsed = time.monotonic() - started
    assert deadline_s <= elapsed < deadline_s + 3
    assert f"{failure} rank 0 at {host}:{port} within {deadline_s:g}s" in str(raised.value)
    assert "DTJ_RENDEZVOUS_TIMEOUT_SECONDS" in str(raised.value)
