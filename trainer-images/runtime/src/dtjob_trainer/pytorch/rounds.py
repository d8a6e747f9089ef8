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
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Final, TypeVar

import torch.distributed as dist

from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.pytorch.distributed import DistributedContext, distributed

log = logging.getLogger(__name__)

T = TypeVar("T")

# gloo reports a peer that went away (its socket closed or reset, a receive timed out) as a plain
# RuntimeError raised from its TCP transport; NCCL's and the store's errors are DistErrors.
GLOO_TRANSPORT: Final = "gloo/transport/"
POLL_SECONDS: Final = 0.05


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


def current_attempt(attempt_file: Path) -> int | None:
    """The attempt the file names; None while it cannot be read (the kubelet swaps it atomically)."""
    try:
        return int(attempt_file.read_text().strip())
    except (OSError, ValueError):
        return None


def wait_for_next_attempt(
    attempt_file: Path, after: int, timeout_s: float, poll_s: float = POLL_SECONDS
) -> int | None:
    """The first attempt past `after` that the file names, polled every `poll_s`; None after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        attempt = current_attempt(attempt_file)
        if attempt is not None and attempt > after:
            return attempt
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def train_in_rounds(
    env: TrainerEnvironment, train: Callable[[DistributedContext, TrainerEnvironment], T]
) -> T:
    """`train(context, env)` in the job's process group, again in each next attempt this pod is kept for
    (see the module docstring); its result once a round returns. `env.attempt` is the round's attempt."""
    round_env = env
    if env.attempt_file is not None:
        round_env = replace(env, attempt=current_attempt(env.attempt_file) or env.attempt)
    while True:
        try:
            with distributed(
                round_env.torch, env.rendezvous_timeout_s, env.termination_message_path, round_env.attempt
            ) as context:
                return train(context, round_env)
        except Exception as error:
            if env.attempt_file is None or not lost_a_peer(error):
                raise
            ended = round_env.attempt
            log.warning("attempt %d ended: %s; waiting to train on in this process", ended, error)
            started = time.monotonic()
            attempt = wait_for_next_attempt(env.attempt_file, ended, env.next_attempt_timeout_s)
            if attempt is None:
                log.error("no next attempt within %.0fs: this pod was not kept", env.next_attempt_timeout_s)
                raise
            log.warning(
                "attempt %d: training on in place (waited %.2fs)", attempt, time.monotonic() - started
            )
            round_env = replace(env, attempt=attempt)
