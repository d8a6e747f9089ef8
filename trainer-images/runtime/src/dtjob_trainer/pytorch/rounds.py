"""Train in rounds: under runPolicy.restartStrategy InPlace, a gang restart keeps this process.

Usage, on every rank (the training function builds its model, optimizer and session, and resumes from
the newest checkpoint, as any script that dtjob restarts does):

    def train(context: DistributedContext, env: TrainerEnvironment) -> Outcome:
        ...
        with open_session(env, context, state, checkpoint_every_steps=50) as session:
            session.resume()
            ...

    outcome = train_in_rounds(TrainerEnvironment.from_environ(), train)

Without DTJ_ATTEMPT_FILE (restartStrategy Recreate, the default) this is `distributed(...)` around one
call of `train`. With it, a round that ends because the gang lost a member (a peer's collective broke,
or a peer stopped on SIGTERM and the ranks saved together) does not end the process: it leaves the
process group and waits until the operator moves this pod to the next attempt (the downward API rewrites
DTJ_ATTEMPT_FILE when the operator relabels the pod, once the lost members' pods are gone), then joins
that attempt's rendezvous and calls `train` again: no new pod, no new interpreter, no imports. An error
of this rank's own (a bug, an out-of-memory) still ends the process, as it would the round anywhere.

Beside DTJ_ATTEMPT_FILE the same volume holds the pod's rank and the rendezvous host (the pod holding rank
0): each round trains as they say. A hot spare (spec.replicas[].spares) starts with no attempt, does
what a first round would otherwise pay for on the way (LAZY_IMPORTS) and waits until the operator gives
it a lost member's rank.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import math
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Final, TypeVar

import torch.distributed as dist

from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.exit_codes import TERMINATED_WITHOUT_CHECKPOINT
from dtjob_trainer.pytorch.distributed import DistributedContext, distributed

log = logging.getLogger(__name__)

T = TypeVar("T")
V = TypeVar("V", int, str)

# gloo reports a peer that went away (its socket closed or reset, a receive timed out) as a plain
# RuntimeError raised from its TCP transport; NCCL's and the store's errors are DistErrors.
GLOO_TRANSPORT: Final = "gloo/transport/"
POLL_SECONDS: Final = 0.05
# Beside DTJ_ATTEMPT_FILE in the same downward API volume (the operator's desired.ATTEMPT_VOLUME).
RANK_FILE: Final = "rank"
RENDEZVOUS_HOST_FILE: Final = "rendezvous-host"
# What a first round imports on first use, which a hot spare imports while it waits rather than after it
# takes a rank: DistributedDataParallel's constructor imports torch._dynamo (0.7 s of CPU here, more than
# the rest of a resume).
LAZY_IMPORTS: Final = ("torch._dynamo",)


class NoNextAttempt(RuntimeError):
    """This pod's round ended and the operator moved it to no later attempt in time."""


class RoundEnded(Exception):
    """The gang stopped together because a member was stopped (SIGTERM) and this one was not: the step
    is saved; this rank trains on in the next attempt."""

    def __init__(self, step: int) -> None:
        super().__init__(f"a peer was stopped; the ranks saved step {step} together")
        self.step = step


def lost_a_peer(error: BaseException) -> bool:
    """Whether `error` says the gang lost a member (this rank itself is fine), here or in its causes."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, RoundEnded | dist.DistError):
            return True
        if isinstance(seen, RuntimeError) and GLOO_TRANSPORT in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(frozen=True)
class Place:
    """Where this pod stands, as the operator last said (the files beside DTJ_ATTEMPT_FILE)."""

    attempt: int
    rank: int | None = None
    """Its rank in the attempt: a spare's is given when it takes one; None where no file says."""
    rendezvous_host: str | None = None
    """The pod that holds rank 0 (a spare may hold it); None where no file says."""

    def environment(self, env: TrainerEnvironment) -> TrainerEnvironment:
        """`env` for a round of this attempt: the files' rank and rendezvous host win over the env vars,
        which stay what they were when the pod was created."""
        torch = env.torch
        if self.rank is not None:
            torch = replace(torch, rank=self.rank)
        if self.rendezvous_host:
            torch = replace(torch, master_addr=self.rendezvous_host)
        return replace(env, attempt=self.attempt, torch=torch)


def current_place(attempt_file: Path) -> Place | None:
    """The attempt, rank and rendezvous host the files name; None while there is no attempt (a hot spare's
    file is empty) or it cannot be read. The kubelet swaps the files together: read again if the attempt
    moved meanwhile."""
    while True:
        attempt = _read(attempt_file, int)
        if attempt is None:
            return None
        rank = _read(attempt_file.with_name(RANK_FILE), int)
        host = _read(attempt_file.with_name(RENDEZVOUS_HOST_FILE), str)
        if _read(attempt_file, int) == attempt:
            return Place(attempt, rank, host or None)


def current_attempt(attempt_file: Path) -> int | None:
    """The attempt the file names; None while there is none or it cannot be read."""
    return _read(attempt_file, int)


def wait_for_place(
    attempt_file: Path, after: int, timeout_s: float, poll_s: float = POLL_SECONDS
) -> Place | None:
    """The first place in an attempt past `after` that the files name, polled every `poll_s`; None after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        place = current_place(attempt_file)
        if place is not None and place.attempt > after:
            return place
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


@contextlib.contextmanager
def sigterm_exits(waiting_for: str) -> Iterator[None]:
    """While this pod waits outside a round (a spare for a rank, a kept member for its next attempt),
    SIGTERM ends the process at once, with TERMINATED_WITHOUT_CHECKPOINT: nothing is under way to save.
    Python as a container's PID 1 would ignore it (the kernel drops a signal whose action is the default
    for a PID namespace's init) and the pod would linger for its whole grace period (30 s by default)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        log.warning("SIGTERM while waiting for %s: nothing to save, exiting", waiting_for)
        raise SystemExit(TERMINATED_WITHOUT_CHECKPOINT)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _read(path: Path, kind: Callable[[str], V]) -> V | None:
    try:
        text = path.read_text().strip()
        return kind(text) if text else None
    except (OSError, ValueError):
        return None


def train_in_rounds(
    env: TrainerEnvironment, train: Callable[[DistributedContext, TrainerEnvironment], T]
) -> T:
    """`train(context, env)` in the job's process group, again in each next attempt this pod is kept for
    (see the module docstring); its result once a round returns. `env.attempt` is the round's attempt."""
    round_env = env
    if env.attempt_file is not None:
        place = current_place(env.attempt_file)
        if place is None:
            # A hot spare (spec.replicas[].spares): imported and ready, outside the gang until the
            # operator gives it a lost member's rank, however long that takes.
            started = time.monotonic()
            for module in LAZY_IMPORTS:
                importlib.import_module(module)
            with sigterm_exits("a rank"):
                log.warning(
                    "a hot spare: waiting for a rank (warmed up in %.2fs)", time.monotonic() - started
                )
                started = time.monotonic()
                place = wait_for_place(env.attempt_file, 0, math.inf)
            assert place is not None  # no deadline
            log.warning(
                "attempt %d: taking rank %s (waited %.2fs as a spare)",
                place.attempt,
                place.rank,
                time.monotonic() - started,
            )
        round_env = place.environment(env)
    while True:
        try:
            with distributed(
                round_env.torch, env.rendezvous_timeout_s, env.termination_message_path, round_env.attempt
            ) as context:
                return train(context, round_env)
        except Exception as error:
            if env.attempt_file is None or not lost_a_peer(error):
                raise
            ended, why = round_env.attempt, str(error).splitlines()[0] if str(error) else type(error).__name__
        # Out of the except block, the traceback goes, and with it (and a collection, for its cycles) the
        # round's model, process group and, on rank 0, its store: the port is free for the next one.
        gc.collect()
        with sigterm_exits("the next attempt"):
            log.warning("attempt %d ended: %s; waiting to train on in this process", ended, why)
            started = time.monotonic()
            place = wait_for_place(env.attempt_file, ended, env.next_attempt_timeout_s)
        if place is None:
            raise NoNextAttempt(
                f"attempt {ended} ended ({why}) and no next attempt came within "
                f"{env.next_attempt_timeout_s:.0f}s (DTJ_NEXT_ATTEMPT_TIMEOUT_SECONDS): this pod was not kept"
            )
        log.warning(
            "attempt %d: training on in place (waited %.2fs)", place.attempt, time.monotonic() - started
        )
        round_env = place.environment(env)
