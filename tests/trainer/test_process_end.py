"""A trainer process's end: end_process exits with the code and what was printed, skipping the
interpreter's teardown; a native crash inside `distributed()` leaves the Python stacks at the head of the
termination message file, where the kubelet reads them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.trainer.process_end_probe", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_end_process_exits_with_its_code_after_flushing_and_skips_the_teardown(tmp_path: Path) -> None:
    marker = tmp_path / "atexit-ran"
    ended = probe("end", str(marker))
    assert ended.returncode == 3
    assert ended.stdout == "printed before the end"
    assert "logged before the end" in ended.stderr
    assert not marker.exists()


def test_a_native_crash_in_the_process_group_writes_the_stacks_to_the_crash_log(tmp_path: Path) -> None:
    crash_log = tmp_path / "termination-log"
    crashed = probe("crash", str(crash_log))
    assert crashed.returncode == -signal.SIGSEGV
    head = crash_log.read_text()[:4096]  # what the kubelet keeps of a termination message file
    assert head.startswith("Fatal Python error: Segmentation fault")
    assert "training_step" in head
