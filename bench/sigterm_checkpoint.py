"""Time from SIGTERM to exit for a 2-rank gang whose state (model + SGD momentum) is about 100 MB.

    .venv/bin/python -m bench.sigterm_checkpoint [--state-mb 100] [--repeats 3]

Starts two local ranks of bench/sigterm_trainer.py (gloo), waits until rank 0 reports training steps,
sends SIGTERM to rank 1, and reports: each rank's exit code (200 = preempted, checkpoint saved), the
seconds from the signal to the last exit, what the ranks wrote to their termination message, and the
checkpoint's size, against the default budget.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from dtjob_trainer.checkpoint_files import CheckpointDirectory
from dtjob_trainer.environment import DEFAULT_PREEMPTION_BUDGET_SECONDS

from bench.checkpoint_stall import state_arguments

HERE = Path(__file__).resolve().parent
STARTUP_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def training_step(metrics_port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    return next(
        (float(line.split()[1]) for line in text.splitlines() if line.startswith("dtjob_trainer_step ")), 0.0
    )


def one_run(workdir: Path, state_mb: float) -> None:
    master_port, metrics_port = free_port(), free_port()
    ranks = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(master_port),
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "OMP_NUM_THREADS": "1",
            "DTJ_CHECKPOINT_DIR": str(workdir / "checkpoints"),
            "DTJ_METRICS_PORT": str(metrics_port if rank == 0 else 0),
            "DTJ_TERMINATION_MESSAGE_PATH": str(workdir / f"rank{rank}.termination-log"),
        }
        log = open(workdir / f"rank{rank}.log", "wb")  # noqa: SIM115 - closed with the process below
        process = subprocess.Popen(
            [sys.executable, str(HERE / "sigterm_trainer.py"), "--state-mb", str(state_mb)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        ranks.append((process, log))
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while training_step(metrics_port) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in ranks):
                raise SystemExit(f"the gang did not start training; see {workdir}")
            time.sleep(0.05)
        signalled = time.monotonic()
        ranks[1][0].send_signal(signal.SIGTERM)
        codes = [process.wait(timeout=DEFAULT_PREEMPTION_BUDGET_SECONDS + 60) for process, _ in ranks]
        elapsed = time.monotonic() - signalled
    finally:
        for process, log in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    checkpoints = CheckpointDirectory(workdir / "checkpoints", keep_last=1)
    step = checkpoints.latest_step()
    size_mb = (
        sum(f.stat().st_size for f in checkpoints.path_for(step).rglob("*") if f.is_file()) / 2**20
        if step is not None
        else 0.0
    )
    message = json.loads((workdir / "rank1.termination-log").read_text())["message"]
    verdict = "within" if elapsed < DEFAULT_PREEMPTION_BUDGET_SECONDS else "OVER"
    print(
        f"exit codes {codes}; {elapsed:.2f}s from SIGTERM to the last exit ({verdict} the "
        f"{DEFAULT_PREEMPTION_BUDGET_SECONDS:.0f}s budget); checkpoint step {step}, {size_mb:.0f} MiB; "
        f"rank 1: {message}"
    )


def main() -> None:
    parser = state_arguments(__doc__, state_mb=100, repeats=3)
    args = parser.parse_args()
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as workdir:
            one_run(Path(workdir), args.state_mb)


if __name__ == "__main__":
    main()
