"""Background processes started with a recorded PID and stopped by that PID, never by name."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from localcluster.layout import Layout


class ProcessError(RuntimeError):
    pass


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class Processes:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def _pidfile(self, name: str) -> Path:
        return self.layout.pids / f"{name}.pid"

    def _argvfile(self, name: str) -> Path:
        return self.layout.pids / f"{name}.argv.json"

    def log(self, name: str) -> Path:
        return self.layout.logs / f"{name}.log"

    def pid(self, name: str) -> int | None:
        """The recorded PID, if that process still runs the binary we started (guards PID reuse)."""
        try:
            pid_text, exe = self._pidfile(name).read_text().split("\n", 1)
            pid = int(pid_text)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None
        # subprocess uses vfork: the parent resumes while a large binary's execve is still setting up
        # its arguments, so an empty cmdline on a live (non-zombie) process means "starting".
        if cmdline == exe.strip() or (cmdline == "" and _alive(pid)):
            return pid
        return None

    def running(self, name: str) -> bool:
        return self.pid(name) is not None

    def start(self, name: str, argv: Sequence[str | Path], env: dict[str, str] | None = None) -> None:
        if self.running(name):
            return
        self.layout.logs.mkdir(parents=True, exist_ok=True)
        self.layout.pids.mkdir(parents=True, exist_ok=True)
        args = [str(a) for a in argv]
        with open(self.log(name), "ab") as log:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the caller; own process group for a clean stop
                env={**os.environ, **(env or {})},
            )
        self._pidfile(name).write_text(f"{proc.pid}\n{args[0]}\n")
        self._argvfile(name).write_text(json.dumps({"argv": args, "env": env or {}}))

    def restart(self, name: str, down_seconds: float = 0.0, crash: bool = True) -> None:
        """An outage of one component: kill it (SIGKILL, as a crash; else SIGTERM first), keep it down
        for `down_seconds` (the outage's length is the point, so this one waits by the clock), and start
        it again as it was started. The caller waits for it to be ready."""
        recorded = json.loads(self._argvfile(name).read_text())
        if crash:
            self.kill(name)
        self.stop(name)
        time.sleep(down_seconds)
        self.start(name, recorded["argv"], recorded["env"])

    def kill(self, name: str) -> None:
        """SIGKILL it and its process group (a crash, a machine gone), and forget it."""
        pid = self.pid(name)
        if pid is not None:
            _signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            _reap(pid)
        self._pidfile(name).unlink(missing_ok=True)

    def stop(self, name: str, timeout: float = 20.0) -> None:
        pid = self.pid(name)
        # The pid file goes first: a component stopped on purpose is never taken for one that died by a
        # health check running beside the stop (Cluster.check_alive, in another test process).
        self._pidfile(name).unlink(missing_ok=True)
        if pid is not None:
            _signal_group(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                _signal_group(pid, signal.SIGKILL)
            _reap(pid)

    def wait_until(
        self, name: str, ready: Callable[[], bool], what: str, timeout: float = 60.0, interval: float = 0.25
    ) -> None:
        """Poll `ready` until it holds; fail loudly, with the log tail, if the process dies or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running(name):
                raise ProcessError(
                    f"{name} exited while waiting for {what}; log tail:\n{log_tail(self.log(name))}"
                )
            try:
                if ready():
                    return
            except Exception:  # not up yet: connection refused, tool exit code, ...
                pass
            time.sleep(interval)
        raise ProcessError(
            f"{name}: {what} not reached in {timeout:.0f}s; log tail:\n{log_tail(self.log(name))}"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own unreaped child) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
