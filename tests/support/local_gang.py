"""Run a job's pods as local processes, with exactly the command and env the operator renders.

The pods come from the operator's own `dtjob.core.render.render_children` applied to a manifest from
examples/. Only what a pod network and the kubelet would provide is substituted:
- rank 0's DNS name (MASTER_ADDR, PET_MASTER_ADDR) and every TF_CONFIG host become 127.0.0.1, and the
  ports become free local ports, since all "pods" share this machine's network namespace;
- `python` in the command is this interpreter (its venv's commands first on PATH, as the image's are), and
  the image's PYTHONPATH points at the examples;
- the directories the job mounts (checkpoint.path, output.modelDir) are set in the job to a temporary
  directory before rendering, and DTJ_METRICS_PORT / DTJ_TERMINATION_MESSAGE_PATH get per-process
  values (a pod has its own port space and its own /dev/termination-log), and DTJ_ATTEMPT_FILE (the
  downward API's file of the pod's attempt label, under restartStrategy InPlace) a file of each pod's.
Everything else is the operator's env, verbatim (CLUSTER_SPEC keeps its DNS names: nothing here reads it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import yaml
from prometheus_client.parser import text_string_to_metric_families

from dtjob.core.names import SPARE_LABEL
from dtjob.core.render import render_children
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.waiting import wait_for

EXAMPLE_MANIFESTS = REPO / "examples"
EXAMPLE_CODE = REPO / "trainer-images" / "examples"
RUNTIME_CODE = REPO / "trainer-images" / "runtime" / "src"
RUN_TIMEOUT_S = 240
Results = dict[str, dict[str, Any]]
T = TypeVar("T")
# Rank 0's address as the operator renders it, for one process per pod and for torchrun.
_TORCH_RENDEZVOUS_VARS = (("MASTER_ADDR", "MASTER_PORT"), ("PET_MASTER_ADDR", "PET_MASTER_PORT"))
# torchrun's c10d rendezvous (an elastic job): "host:port" in one variable.
_TORCH_ENDPOINT_VAR = "PET_RDZV_ENDPOINT"


def example_module(name: str) -> ModuleType:
    """A self-contained module of the examples package, loaded from its file (the package itself is
    on the image's PYTHONPATH, not on the test runner's)."""
    module_name = f"example_file_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            module_name, EXAMPLE_CODE / "dtjob_examples" / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[module_name]


def local_job(manifest: str, workdir: Path) -> dict[str, Any]:
    """The example job as the apiserver would hand it to the operator, with mounts under `workdir`."""
    job = yaml.safe_load((EXAMPLE_MANIFESTS / manifest).read_text())
    job["metadata"].update(namespace="default", uid=str(uuid.uuid4()))
    job["spec"]["checkpoint"]["path"] = str(workdir / "checkpoints")
    job["spec"].setdefault("output", {})["modelDir"] = str(workdir / "model")
    return job


def rendered_pods(job: Mapping[str, Any], attempt: int) -> list[dict[str, Any]]:
    """The Pods the operator renders for `attempt` of `job` (its own function, not a copy)."""
    return [child for child in render_children(job, attempt) if child["kind"] == "Pod"]


@dataclass
class LocalPod:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    termination_message_path: Path
    metrics_port: int

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def result(self) -> dict[str, Any]:
        """The example's final JSON line."""
        for line in reversed(self.log().splitlines()):
            if line.startswith("{") and '"event": "result"' in line:
                return dict(json.loads(line))
        raise AssertionError(f"{self.name} printed no result line; log tail:\n{self.log()[-3000:]}")

    def termination_message(self) -> dict[str, Any]:
        return dict(json.loads(self.termination_message_path.read_text()))

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.process.wait()
            raise AssertionError(
                f"{self.name} did not exit within {timeout:.0f}s; log tail:\n{self.log()[-3000:]}"
            ) from None

    def signal(self, signum: signal.Signals) -> None:
        """As a container's processes get it: SIGKILL ends them all (the pod is gone); any other signal
        goes to the main process (a container's PID 1), which passes it on as it will (torchrun does)."""
        if signum == signal.SIGKILL:
            self.kill()
        else:
            self.process.send_signal(signum)

    def kill(self) -> None:
        """Every process of the pod, as when its container goes: the command and whatever it started
        (torchrun's workers, which it puts in sessions of their own)."""
        for pid in (self.process.pid, *_descendants(self.process.pid)):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class LocalGang:
    """The pods of one attempt, started together; every process is killed when the block ends."""

    def __init__(self, pods: list[dict[str, Any]], workdir: Path) -> None:
        self.pods: dict[str, LocalPod] = {}
        self._workdir = workdir
        self._specs = pods
        self._addresses = _local_addresses(pods)
        self._attempt_files: dict[str, Path] = {}

    def start(self) -> LocalGang:
        for pod in self._specs:
            self._start(pod)
        return self

    def pod_named(self, suffix: str) -> LocalPod:
        """The pod whose name ends with `suffix`, e.g. "worker-1"."""
        matches = [pod for name, pod in self.pods.items() if name.endswith(suffix)]
        assert len(matches) == 1, f"{suffix!r} matches {[pod.name for pod in matches]} in {list(self.pods)}"
        return matches[0]

    def start_again(self, suffix: str) -> LocalPod:
        """A new pod in the place of the one whose name ends with `suffix`, which has exited (what the
        operator does for an elastic gang's lost member); its log goes to a file of its own."""
        gone = self.pod_named(suffix)
        assert gone.process.poll() is not None, f"{gone.name} still runs"
        self._start(next(pod for pod in self._specs if pod["metadata"]["name"] == gone.name))
        return self.pods[gone.name]

    def keep_for_attempt(self, suffix: str, attempt: int, rank: int | None = None) -> None:
        """What an in-place restart does to a member it keeps, or to a spare that takes `rank`: the
        operator relabels the pod with the attempt (and the rank), and the kubelet swaps the downward
        API's files for ones that say so (the rank, and where rank 0 is: here, this machine)."""
        path = self._attempt_files[self.pod_named(suffix).name]
        if rank is not None:
            _swap(path.with_name("rank"), str(rank))
            _swap(path.with_name("rendezvous-host"), "127.0.0.1")
        _swap(path, str(attempt))

    def add(self, pod: Mapping[str, Any]) -> LocalPod:
        """A pod started beside the gang's (a hot spare)."""
        assert pod["metadata"]["name"] not in self.pods
        self._start(pod)
        return self.pods[pod["metadata"]["name"]]

    def replace_with(self, pod: Mapping[str, Any]) -> LocalPod:
        """A new pod from `pod` (rendered for a later attempt) in the place of its namesake, which has
        exited: a lost member of an in-place restart."""
        name = pod["metadata"]["name"]
        assert self.pods[name].process.poll() is not None, f"{name} still runs"
        self._start(pod)
        return self.pods[name]

    def wait_all(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        return {name: pod.wait(max(0.0, deadline - time.monotonic())) for name, pod in self.pods.items()}

    def stop_with_sigterm(self, suffix: str, timeout: float) -> tuple[dict[str, int], float]:
        """SIGTERM to one pod, as the kubelet sends it on preemption; every pod's exit code, and the
        seconds from the signal until the last pod exited."""
        signalled = time.monotonic()
        self.pod_named(suffix).signal(signal.SIGTERM)
        codes = self.wait_all(timeout)
        return codes, time.monotonic() - signalled

    def kill_all(self) -> None:
        """What the operator does to a gang: every pod goes, at once."""
        for pod in self.pods.values():
            pod.kill()
        for pod in self.pods.values():
            pod.process.wait()

    def wait_for(
        self, probe: Callable[[], T | None], what: str, timeout: float = RUN_TIMEOUT_S, interval: float = 0.2
    ) -> T:
        """`tests.support.waiting.wait_for`, giving up with every pod's log as soon as any pod has exited, or
        with them all when time runs out."""
        try:
            return wait_for(probe, what, timeout, interval, hopeless=self._an_exit)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.logs()}") from None

    def _an_exit(self) -> str | None:
        exited = {name: pod.process.poll() for name, pod in self.pods.items()}
        codes = {name: code for name, code in exited.items() if code is not None}
        return f"exited: {codes}" if codes else None

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{pod.log()[-3000:]}" for name, pod in self.pods.items())

    def _start(self, pod: Mapping[str, Any]) -> None:
        name = pod["metadata"]["name"]
        container = _trainer_container(pod)
        metrics_port = free_port()
        termination_message_path = self._workdir / f"{name}.termination-log"
        env = {
            # The image's environment: its venv's commands (accelerate, torchrun) first.
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": os.environ.get("HOME", "/tmp"),
            "LANG": "C.UTF-8",
            # The examples and the runtime of this tree (as the image has them), whatever is installed.
            "PYTHONPATH": f"{EXAMPLE_CODE}:{RUNTIME_CODE}",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            # Per pod: its own port space and its own /dev/termination-log.
            "DTJ_METRICS_PORT": str(metrics_port),
            "DTJ_TERMINATION_MESSAGE_PATH": str(termination_message_path),
        }
        env.update(self._localized(_env_of(container)))
        if "DTJ_ATTEMPT_FILE" in env:
            # The pod's own downward API volume: a spare's labels name no attempt or rank yet.
            spare = pod["metadata"]["labels"].get(SPARE_LABEL) == "true"
            files = self._workdir / f"{name}.attempt"
            files.mkdir(exist_ok=True)
            attempt_file = self._attempt_files[name] = files / "attempt"
            attempt_file.write_text("" if spare else env["DTJ_ATTEMPT"])
            (files / "rank").write_text("" if spare else env["RANK"])
            (files / "rendezvous-host").write_text(env["MASTER_ADDR"])
            env["DTJ_ATTEMPT_FILE"] = str(attempt_file)
        argv = [*container.get("command", []), *container.get("args", [])]
        argv = [sys.executable if arg in ("python", "python3") else arg for arg in argv]
        log_path = self._workdir / f"{name}.attempt-{env.get('DTJ_ATTEMPT', '0')}.log"
        if name in self.pods:  # a replacement
            log_path = log_path.with_suffix(f".{uuid.uuid4().hex[:6]}.log")
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(argv, env=env, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO)
        self.pods[name] = LocalPod(name, process, log_path, termination_message_path, metrics_port)

    def _localized(self, env: dict[str, str]) -> dict[str, str]:
        local = dict(env)
        for address_var, port_var in _TORCH_RENDEZVOUS_VARS:
            if address_var in local:
                host, port = self._addresses[f"{local[address_var]}:{local[port_var]}"].rsplit(":", 1)
                local[address_var], local[port_var] = host, port
        if _TORCH_ENDPOINT_VAR in local:
            local[_TORCH_ENDPOINT_VAR] = self._addresses[local[_TORCH_ENDPOINT_VAR]]
        if "TF_CONFIG" in local:
            tf_config = json.loads(local["TF_CONFIG"])
            tf_config["cluster"] = {
                job: [self._addresses[address] for address in tasks]
                for job, tasks in tf_config["cluster"].items()
            }
            local["TF_CONFIG"] = json.dumps(tf_config)
        return local


def _swap(path: Path, text: str) -> None:
    staged = path.with_suffix(".staged")
    staged.write_text(text)
    staged.replace(path)


def _descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, from /proc (the ones alive now)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    found, frontier = [], [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found += children
        frontier += children
    return found


@contextmanager
def running(pods: list[dict[str, Any]], workdir: Path) -> Iterator[LocalGang]:
    gang = LocalGang(pods, workdir)
    try:
        yield gang.start()
    finally:
        gang.kill_all()


def run_to_completion(job: dict[str, Any], attempt: int, workdir: Path) -> dict[str, LocalPod]:
    with running(rendered_pods(job, attempt), workdir) as gang:
        codes = gang.wait_all(RUN_TIMEOUT_S)
        assert set(codes.values()) == {0}, f"exit codes {codes}\n{gang.logs()}"
        return gang.pods


def train(job: dict[str, Any], attempt: int, workdir: Path) -> Results:
    """Run the gang to completion; each rank's result line."""
    return {name: pod.result() for name, pod in run_to_completion(job, attempt, workdir).items()}


def the_one(values: set[Any]) -> Any:
    assert len(values) == 1, f"ranks disagree: {values}"
    return next(iter(values))


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _trainer_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = pod["spec"]["containers"]
    return next((c for c in containers if c["name"] == "trainer"), containers[0])


def _env_of(container: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        assert "value" in entry, f"the local gang runs literal env values only, not {entry}"
        env[entry["name"]] = str(entry["value"])
    return env


def _local_addresses(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Every rendezvous address the pods name ("host:port") mapped to a free local one."""
    names: set[str] = set()
    for pod in pods:
        env = _env_of(_trainer_container(pod))
        for address_var, port_var in _TORCH_RENDEZVOUS_VARS:
            if address_var in env:
                names.add(f"{env[address_var]}:{env[port_var]}")
        if _TORCH_ENDPOINT_VAR in env:
            names.add(env[_TORCH_ENDPOINT_VAR])
        if "TF_CONFIG" in env:
            for tasks in json.loads(env["TF_CONFIG"])["cluster"].values():
                names.update(tasks)
    return {name: f"127.0.0.1:{free_port()}" for name in sorted(names)}
