"""The console with a job that trains and restarts for real (tier C): `dtjob watch` in a real terminal
(a tmux pane, captured), `dtjob logs -f` across the gang restart, then `dtjob logs`, `dtjob describe` and
`kubectl dtj get` on the finished job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from hack import images
from localcluster import Cluster
from tests.support.ddp_progress import STEPS_PER_EPOCH, example, progress_of
from tests.support.jobs import Jobs
from tests.support.operator import operator_taking_reports
from tests.support.waiting import wait_for

DTJOB = [sys.executable, "-m", "dtjob.cli"]
EPOCHS = 300  # about 30 s of training an attempt on this machine: time to watch it and to disrupt it
DISRUPT_AFTER_STEP = 400


class Pane:
    """A command in a tmux pane of a given size: a real terminal, read back as the user would see it. A
    tmux server of its own (-L), started from this process, so the command gets this process's KUBECONFIG."""

    def __init__(self, name: str, command: list[str]) -> None:
        self.tmux = ["tmux", "-L", name]
        shell = " ".join(f"'{part}'" for part in command) + "; echo exit=$?; sleep 3600"
        subprocess.run([*self.tmux, "new-session", "-d", "-x", "110", "-y", "40", shell], check=True)

    def text(self) -> str:
        return subprocess.run(
            [*self.tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True
        ).stdout

    def showing(self, *texts: str, timeout: float = 30) -> str:
        """The screen, once it shows all of `texts`."""

        screens = [""]

        def shown() -> str | None:
            screens[0] = self.text()
            return screens[0] if all(t in screens[0] for t in texts) else None

        try:
            return wait_for(shown, f"the terminal to show {texts}", timeout=timeout)
        except AssertionError as timed_out:
            raise AssertionError(f"{timed_out}; the terminal showed:\n{screens[0]}") from None

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False)


@pytest.fixture
def pane() -> Iterator[type[Pane]]:
    assert shutil.which("tmux"), "tmux is one of the Debian packages `make deps` installs"
    opened: list[Pane] = []

    class Opened(Pane):
        def __init__(self, name: str, command: list[str]) -> None:
            super().__init__(name, command)
            opened.append(self)

    yield Opened
    for p in opened:
        p.close()


def dtjob(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DTJOB, *args], capture_output=True, text=True, timeout=60)


def test_watch_and_logs_follow_a_job_through_a_gang_restart_to_the_end(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch, pane: type[Pane], tmp_path: Path,
) -> None:  # fmt: skip
    name = "console"
    job = example(name, ["--epochs", str(EPOCHS), "--checkpoint-every", "200", "--async-checkpoints"])
    images.ensure(cluster_c, images.TORCH_TRAINER)
    logs_file = tmp_path / "logs.txt"
    with operator_taking_reports(cluster_c, namespace, monkeypatch):
        jobs.create(job)
        # The KUBECONFIG of this session (tests/conftest.py) is the console's too.
        watching = pane(f"watch-{namespace}", [*DTJOB, "watch", name, "-n", namespace])
        with logs_file.open("w") as out:
            following = subprocess.Popen(
                [*DTJOB, "logs", name, "-n", namespace, "-f"], stdout=out, stderr=out
            )
            try:
                wait_for(
                    lambda: (p := progress_of(jobs, name)) and p["step"] >= DISRUPT_AFTER_STEP,
                    f"step {DISRUPT_AFTER_STEP}", timeout=300,
                )  # fmt: skip
                frame = watching.showing("Running", f"/{EPOCHS * STEPS_PER_EPOCH}")
                assert "Attempt   1" in frame and "━" in frame, frame
                core.delete_namespaced_pod(f"{name}-worker-1", namespace)
                frame = watching.showing("attempt 2 began: PodFailed", timeout=120)
                assert "Attempt   2" in frame or "Restarting" in frame, frame
                jobs.wait_condition(name, "Succeeded", timeout=600)
                assert following.wait(timeout=120) == 0, logs_file.read_text()[-3000:]
            finally:
                following.kill()
        frame = watching.showing("exit=")
    assert "exit=0" in frame and "Succeeded" in frame and "Restarts  1 (1 failure)" in frame, frame

    followed = logs_file.read_text()
    for attempt in (1, 2):
        for member in ("worker-0", "worker-1"):
            assert f"[attempt {attempt} {member}] " in followed, f"no line of attempt {attempt} {member}"
    assert '[attempt 2 worker-0] {"event": "result"' in followed, followed[-3000:]

    # Rank 0's pod stays when the job succeeds (cleanPodPolicy Running deletes the others if still up).
    shown = dtjob("logs", name, "-n", namespace, "--rank", "0")
    assert shown.returncode == 0 and shown.stdout, shown.stderr
    assert {line.split("]")[0] for line in shown.stdout.splitlines()} == {"[attempt 2 worker-0"}
    gone = dtjob("logs", name, "-n", namespace, "--attempt", "1")
    assert gone.returncode == 1 and "the gang restarted since (attempt 2 now)" in gone.stderr, gone

    described = dtjob("describe", name, "-n", namespace)
    assert described.returncode == 0, described.stderr
    for expected in ("Succeeded", "Last restart  PodFailed", f"{name}-worker-1", "Events"):
        assert expected in described.stdout, described.stdout

    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # kubectl-dtj, where pip put it
    listed = subprocess.run([str(cluster_c.layout.kubectl), "dtj", "get", "-n", namespace],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "PATH": path})  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith(name))
    assert row[1:7] == ["Succeeded", "0/2", "2", "1", "(1", "failure)"], listed.stdout
