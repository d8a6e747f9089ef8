"""The SIGTERM budget: however stuck the process is, it exits when the budget runs out, with the code
that says whether a checkpoint was saved."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dtjob_trainer.exit_codes import PREEMPTED_CHECKPOINT_SAVED, TERMINATED_WITHOUT_CHECKPOINT

from tests.support.paths import REPO

BUDGET_S = 1.0


@pytest.mark.parametrize(
    ("extra_args", "exit_code", "reason"),
    [
        pytest.param(
            [], TERMINATED_WITHOUT_CHECKPOINT, "TerminatedWithoutCheckpoint", id="stuck before saving"
        ),
        pytest.param(
            ["--saved-step", "7"],
            PREEMPTED_CHECKPOINT_SAVED,
            "PreemptedCheckpointSaved",
            id="stuck after saving",
        ),
    ],
)
def test_a_stuck_process_exits_when_the_budget_runs_out(
    tmp_path: Path, extra_args: list[str], exit_code: int, reason: str
) -> None:
    message_path = tmp_path / "termination-log"
    probe = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.trainer.termination_probe",
            str(BUDGET_S),
            str(message_path),
            *extra_args,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert probe.stdout is not None and probe.stdout.readline() == "ready\n"
        signalled = time.monotonic()
        probe.send_signal(signal.SIGTERM)
        assert probe.wait(timeout=BUDGET_S + 20) == exit_code
        assert BUDGET_S <= time.monotonic() - signalled < BUDGET_S + 5
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait()
    assert json.loads(message_path.read_text())["reason"] == reason
