"""Training in rounds (runPolicy.restartStrategy InPlace): what ends a round rather than the process, and
waiting for the operator to move the pod to the next attempt. The rounds themselves, in local gangs: see
test_pytorch_gang.py."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist
from dtjob_trainer.environment import DEFAULT_NEXT_ATTEMPT_TIMEOUT_SECONDS, TrainerEnvironment
from dtjob_trainer.exit_codes import TERMINATED_WITHOUT_CHECKPOINT
from dtjob_trainer.pytorch.rounds import (
    Place,
    RoundEnded,
    current_attempt,
    current_place,
    lost_a_peer,
    wait_for_place,
)

from tests.support.paths import REPO

# What gloo raised here (torch 2.x) when a peer's process was killed mid all-reduce.
GLOO_PEER_RESET = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
    "[127.0.0.1]:7881: Connection reset by peer. This is typically caused by a peer process exiting"
)


@pytest.mark.parametrize(
    ("error", "ends_the_round"),
    [
        pytest.param(RoundEnded(40), True, id="a peer stopped by SIGTERM, the step saved together"),
        pytest.param(RuntimeError(GLOO_PEER_RESET), True, id="gloo: a peer's socket reset"),
        pytest.param(dist.DistNetworkError("Connection was likely closed"), True, id="the store's host gone"),
        pytest.param(dist.DistBackendError("NCCL communicator was aborted"), True, id="NCCL's error"),
        pytest.param(ValueError("rank 1 fails after step 30"), False, id="this rank's own bug"),
        pytest.param(RuntimeError("CUDA out of memory"), False, id="this rank's own RuntimeError"),
        pytest.param(KeyboardInterrupt(), False, id="not an Exception"),
    ],
)
def test_only_a_lost_peer_ends_a_round(error: BaseException, ends_the_round: bool) -> None:
    assert lost_a_peer(error) is ends_the_round


def test_a_lost_peer_behind_another_error_ends_the_round_too() -> None:
    try:
        try:
            raise RuntimeError(GLOO_PEER_RESET)
        except RuntimeError as gloo:
            raise ValueError("the loss could not be reduced") from gloo
    except ValueError as wrapped:
        assert lost_a_peer(wrapped)


def test_waiting_for_the_next_attempt_returns_once_the_file_names_a_later_one(tmp_path: Path) -> None:
    attempt_file = tmp_path / "attempt"
    attempt_file.write_text("2\n")
    assert current_attempt(attempt_file) == 2

    def relabelled() -> None:
        time.sleep(0.2)
        staged = tmp_path / "staged"
        staged.write_text("3\n")
        staged.replace(attempt_file)  # the kubelet swaps the downward API's files atomically

    threading.Thread(target=relabelled).start()
    started = time.monotonic()
    assert wait_for_place(attempt_file, after=2, timeout_s=30, poll_s=0.01) == Place(3)
    assert time.monotonic() - started < 5


def test_waiting_gives_up_after_its_timeout_and_an_unreadable_file_is_no_attempt(tmp_path: Path) -> None:
    attempt_file = tmp_path / "attempt"
    assert current_attempt(attempt_file) is None
    attempt_file.write_text("")
    assert current_attempt(attempt_file) is None
    attempt_file.write_text("2")
    assert wait_for_place(attempt_file, after=2, timeout_s=0.1, poll_s=0.01) is None


def test_a_spare_has_no_place_until_its_files_give_it_a_rank_and_the_files_win_over_the_env(
    tmp_path: Path,
) -> None:
    attempt_file = tmp_path / "attempt"
    for name in ("attempt", "rank", "rendezvous-host"):
        (tmp_path / name).write_text("")  # a spare: the labels are not there yet
    assert current_place(attempt_file) is None
    (tmp_path / "rank").write_text("1")
    (tmp_path / "rendezvous-host").write_text("job-worker-spare0.job.ns.svc")
    (tmp_path / "attempt").write_text("4")
    place = current_place(attempt_file)
    assert place == Place(4, 1, "job-worker-spare0.job.ns.svc")
    env = TrainerEnvironment.from_environ(
        {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "job-worker-0.job.ns.svc", "DTJ_ATTEMPT": "1"}
    )
    round_env = place.environment(env)
    assert (round_env.attempt, round_env.torch.rank, round_env.torch.master_addr) == (
        4,
        1,
        "job-worker-spare0.job.ns.svc",
    )
    assert round_env.torch.world_size == 2


def test_the_attempt_file_and_the_wait_come_from_the_pods_environment() -> None:
    env = TrainerEnvironment.from_environ({"DTJ_ATTEMPT": "1"})
    assert (env.attempt_file, env.next_attempt_timeout_s) == (None, DEFAULT_NEXT_ATTEMPT_TIMEOUT_SECONDS)
    env = TrainerEnvironment.from_environ(
        {"DTJ_ATTEMPT_FILE": "/etc/dtjob/attempt/attempt", "DTJ_NEXT_ATTEMPT_TIMEOUT_SECONDS": "60"}
    )
    assert (env.attempt_file, env.next_attempt_timeout_s) == (Path("/etc/dtjob/attempt/attempt"), 60.0)


def test_a_spare_waiting_for_a_rank_exits_on_sigterm_at_once(tmp_path: Path) -> None:
    """As a container's PID 1, Python ignores a SIGTERM left to its default action: the waiting spare (or
    kept member) must take it itself, or its pod lingers for its whole grace period."""
    attempt_file = tmp_path / "attempt"
    attempt_file.write_text("")
    spare = subprocess.Popen(
        [sys.executable, "-m", "tests.trainer.spare_probe", str(attempt_file)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert spare.stdout is not None
        assert "a hot spare: waiting for a rank" in spare.stdout.readline()
        spare.send_signal(signal.SIGTERM)
        assert spare.wait(timeout=10) == TERMINATED_WITHOUT_CHECKPOINT
        assert "SIGTERM while waiting for a rank" in spare.stdout.read()
    finally:
        if spare.poll() is None:
            spare.kill()
            spare.wait()
