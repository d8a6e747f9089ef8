"""The environment a training pod receives: the operator's rendezvous contract plus the runtime's knobs.

Contract (docs/trainer-runtime.md): PyTorch reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK
(set by the operator for one process per pod, and overwritten by torchrun for its workers); TensorFlow
reads TF_CONFIG; every pod gets DTJ_JOB_NAME, DTJ_ROLE, DTJ_REPLICA_INDEX, DTJ_ATTEMPT,
DTJ_CHECKPOINT_DIR and the Vertex-style AIP_* directories. Knobs a user may set in the pod template:
DTJ_RENDEZVOUS_TIMEOUT_SECONDS, DTJ_PREEMPTION_BUDGET_SECONDS, DTJ_METRICS_PORT,
DTJ_TERMINATION_MESSAGE_PATH, DTJ_NEXT_ATTEMPT_TIMEOUT_SECONDS. Under runPolicy.restartStrategy InPlace
the operator adds DTJ_ATTEMPT_FILE: the pod's current attempt, which changes when the pod is kept for the
next one (DTJ_ATTEMPT stays the attempt the pod was created in).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

DEFAULT_RENDEZVOUS_TIMEOUT_SECONDS = 600.0
# GKE Spot gives user pods about 15 s between SIGTERM and SIGKILL; keep margin for process exit.
DEFAULT_PREEMPTION_BUDGET_SECONDS = 10.0
DEFAULT_METRICS_PORT = 9400
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# How long a member kept by an in-place restart waits for the operator to start the next attempt: past a
# failure restart's backoff (at most 300 s) and failureSettleSeconds' default, with room to spare.
DEFAULT_NEXT_ATTEMPT_TIMEOUT_SECONDS = 900.0

_Number = TypeVar("_Number", int, float)


class TrainerEnvironmentError(ValueError):
    """An environment variable is missing or malformed; the message names it."""


@dataclass(frozen=True)
class TorchRendezvous:
    master_addr: str
    master_port: int
    world_size: int
    rank: int
    local_rank: int


@dataclass(frozen=True)
class TFConfig:
    cluster: Mapping[str, list[str]]
    task_type: str
    task_index: int

    @property
    def is_chief(self) -> bool:
        """The chief task if the cluster has one, else worker 0 (TensorFlow's own convention)."""
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0


@dataclass(frozen=True)
class TrainerEnvironment:
    job_name: str | None
    role: str | None
    replica_index: int | None
    attempt: int
    checkpoint_dir: Path | None
    # A path or a gs:// URI, as Vertex AI scripts expect.
    model_dir: str | None
    tensorboard_dir: str | None
    torch: TorchRendezvous
    tf_config: TFConfig | None
    rendezvous_timeout_s: float
    preemption_budget_s: float
    metrics_port: int | None
    termination_message_path: Path
    attempt_file: Path | None = None
    """Where the pod's current attempt is (runPolicy.restartStrategy InPlace); None: one attempt a pod."""
    next_attempt_timeout_s: float = DEFAULT_NEXT_ATTEMPT_TIMEOUT_SECONDS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> TrainerEnvironment:
        checkpoint_dir = environ.get("DTJ_CHECKPOINT_DIR") or environ.get("AIP_CHECKPOINT_DIR")
        metrics_port = _integer(environ, "DTJ_METRICS_PORT", DEFAULT_METRICS_PORT)
        return cls(
            job_name=environ.get("DTJ_JOB_NAME"),
            role=environ.get("DTJ_ROLE"),
            replica_index=_optional_integer(environ, "DTJ_REPLICA_INDEX"),
            attempt=_integer(environ, "DTJ_ATTEMPT", 0),
            checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
            model_dir=environ.get("AIP_MODEL_DIR") or None,
            tensorboard_dir=environ.get("AIP_TENSORBOARD_LOG_DIR") or None,
            torch=_torch_rendezvous(environ),
            tf_config=_tf_config(environ),
            rendezvous_timeout_s=_seconds(
                environ, "DTJ_RENDEZVOUS_TIMEOUT_SECONDS", DEFAULT_RENDEZVOUS_TIMEOUT_SECONDS
            ),
            preemption_budget_s=_seconds(
                environ, "DTJ_PREEMPTION_BUDGET_SECONDS", DEFAULT_PREEMPTION_BUDGET_SECONDS
            ),
            metrics_port=metrics_port or None,
            termination_message_path=Path(
                environ.get("DTJ_TERMINATION_MESSAGE_PATH", DEFAULT_TERMINATION_MESSAGE_PATH)
            ),
            attempt_file=Path(attempt_file) if (attempt_file := environ.get("DTJ_ATTEMPT_FILE")) else None,
            next_attempt_timeout_s=_seconds(
                environ, "DTJ_NEXT_ATTEMPT_TIMEOUT_SECONDS", DEFAULT_NEXT_ATTEMPT_TIMEOUT_SECONDS
            ),
        )


def _torch_rendezvous(environ: Mapping[str, str]) -> TorchRendezvous:
    world_size = _integer(environ, "WORLD_SIZE", 1)
    rank = _integer(environ, "RANK", 0)
    if world_size < 1 or not 0 <= rank < world_size:
        raise TrainerEnvironmentError(f"RANK={rank} does not fit WORLD_SIZE={world_size}")
    master_addr = environ.get("MASTER_ADDR")
    if master_addr is None and world_size > 1:
        raise TrainerEnvironmentError(f"MASTER_ADDR is not set but WORLD_SIZE={world_size}")
    return TorchRendezvous(
        master_addr=master_addr or "127.0.0.1",
        master_port=_integer(environ, "MASTER_PORT", 29500),
        world_size=world_size,
        rank=rank,
        local_rank=_integer(environ, "LOCAL_RANK", 0),
    )


def _tf_config(environ: Mapping[str, str]) -> TFConfig | None:
    raw = environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        parsed = json.loads(raw)
        cluster = {str(job): [str(address) for address in tasks] for job, tasks in parsed["cluster"].items()}
        task_type = str(parsed["task"]["type"])
        task_index = int(parsed["task"]["index"])
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise TrainerEnvironmentError(f"TF_CONFIG is not valid: {err!r}: {raw}") from err
    return TFConfig(cluster=cluster, task_type=task_type, task_index=task_index)


def _optional_integer(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    return None if raw is None or raw == "" else _parse(name, raw, int)


def _integer(environ: Mapping[str, str], name: str, default: int) -> int:
    value = _optional_integer(environ, name)
    return default if value is None else value


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    value = default if raw is None or raw == "" else _parse(name, raw, float)
    if value <= 0:
        raise TrainerEnvironmentError(f"{name}={raw!r} must be a positive number of seconds")
    return value


def _parse(name: str, raw: str, kind: Callable[[str], _Number]) -> _Number:
    try:
        return kind(raw)
    except ValueError as err:
        raise TrainerEnvironmentError(f"{name}={raw!r} is not a number") from err
