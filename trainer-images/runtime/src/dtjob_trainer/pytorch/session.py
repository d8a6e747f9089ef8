"""The per-step duties of a training loop: checkpoints, progress metrics, and stopping on SIGTERM.

Usage, on every rank:

    with distributed(env.torch, env.rendezvous_timeout_s, env.termination_message_path) as context:
        state = TrainingState(model, optimizer, scheduler)
        with open_session(env, context, state, checkpoint_every_steps=50) as session:
            session.resume()
            for epoch in range(state.progress.epoch, epochs):
                sampler.set_position(epoch, state.progress.batches_in_epoch * batch_size)
                for batch in loader:
                    loss = train_step(batch)
                    session.end_of_step(loss.item(), samples=len(batch))
                session.end_of_epoch()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import NoReturn

import torch
import torch.distributed as dist

from dtjob_trainer.environment import TrainerEnvironment, TrainerEnvironmentError
from dtjob_trainer.exit_codes import PREEMPTED_CHECKPOINT_SAVED
from dtjob_trainer.progress import ProgressReporter
from dtjob_trainer.progress_report import ProgressPoster
from dtjob_trainer.pytorch.checkpoint import CheckpointLayout, CheckpointManager
from dtjob_trainer.pytorch.distributed import DistributedContext
from dtjob_trainer.pytorch.own_time import OwnStepClock
from dtjob_trainer.pytorch.rounds import RoundEnded
from dtjob_trainer.pytorch.state import TrainingState
from dtjob_trainer.termination import TerminationSignal


class TrainingSession:
    """Call `end_of_step` on every rank after every optimizer step, and `end_of_epoch` after each epoch.

    A SIGTERM on any rank makes all ranks agree (an all-reduce each step) to stop after the same step:
    a rank that left alone would leave the others hanging in their next collective. They save that
    step and exit with PREEMPTED_CHECKPOINT_SAVED; with `in_place` (runPolicy.restartStrategy InPlace),
    only the ranks that got the SIGTERM do: the others end the round (RoundEnded) and train on in the
    next attempt (rounds.train_in_rounds).
    """

    def __init__(
        self,
        context: DistributedContext,
        state: TrainingState,
        checkpoints: CheckpointManager,
        termination: TerminationSignal,
        *,
        checkpoint_every_steps: int,
        reporter: ProgressReporter | None = None,
        poster: ProgressPoster | None = None,
        asynchronous_checkpoints: bool = False,
        own_time: OwnStepClock | None = None,
        in_place: bool = False,
    ) -> None:
        if checkpoint_every_steps < 1:
            raise ValueError(f"checkpoint_every_steps must be at least 1, got {checkpoint_every_steps}")
        self.context = context
        self.state = state
        self.checkpoints = checkpoints
        self.termination = termination
        self._every = checkpoint_every_steps
        self._reporter = reporter
        self._poster = poster
        self._asynchronous = asynchronous_checkpoints
        self._own_time = own_time
        self._in_place = in_place

    def resume(self) -> int | None:
        """Load the latest checkpoint, if any, into the state; the step it resumed from."""
        step = self.checkpoints.restore_latest(self.state)
        # On every rank, not rank 0's alone: the operator takes the step the new attempt resumed from
        # (status.goodput) from whichever rank reports first.
        self._report_checkpoint(step)
        return step

    def end_of_step(self, loss: float, samples: int) -> None:
        """`samples`: trained on by this rank in the step just finished."""
        progress = self.state.progress
        progress.step += 1
        progress.batches_in_epoch += 1
        if self._reporter is not None:
            self._reporter.record_step(progress.step, progress.epoch, loss, samples * self.context.world_size)
        if self._poster is not None:
            own = self._own_time.step_done() if self._own_time is not None else None
            self._poster.record_step(
                progress.step, progress.epoch, loss, samples * self.context.world_size, own
            )
        if self._stop_requested_anywhere():
            self._save_and_exit()
        if progress.step % self._every == 0:
            with self.saving():
                if self._asynchronous:
                    self.checkpoints.save_async(self.state)
                else:
                    self.checkpoints.save(self.state)
        self._report_checkpoint(self.checkpoints.published_step)
        if self._own_time is not None:
            self._own_time.next_step()

    @contextmanager
    def saving(self) -> Iterator[None]:
        """Tell the operator a save is under way: a step that does not advance meanwhile is not a hang
        (runPolicy.progressDeadlineSeconds). The session's own checkpoints use it; wrap your own saves."""
        if self._poster is not None:
            self._poster.checkpointing(True)
        try:
            yield
        finally:
            if self._poster is not None:
                self._poster.checkpointing(False)

    def end_of_epoch(self) -> None:
        self.state.progress.epoch += 1
        self.state.progress.batches_in_epoch = 0

    def _stop_requested_anywhere(self) -> bool:
        flag = torch.tensor([1 if self.termination.requested else 0], device=self.context.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _save_and_exit(self) -> NoReturn:
        self.checkpoints.save(self.state)
        self._report_checkpoint(self.checkpoints.published_step)
        if self._in_place and not self.termination.requested:
            raise RoundEnded(self.state.progress.step)
        self.termination.checkpoint_saved(self.state.progress.step)
        raise SystemExit(PREEMPTED_CHECKPOINT_SAVED)

    def _report_checkpoint(self, step: int | None) -> None:
        if step is None:
            return
        for sink in (self._reporter, self._poster):
            if sink is not None:
                sink.record_checkpoint(step)


@contextmanager
def open_session(
    env: TrainerEnvironment,
    context: DistributedContext,
    state: TrainingState,
    *,
    checkpoint_every_steps: int,
    checkpoint_layout: CheckpointLayout = "replicated",
    asynchronous_checkpoints: bool = False,
    keep_last: int = 3,
    total_steps: int | None = None,
    checkpoint_in_memory: bool = True,
) -> Iterator[TrainingSession]:
    """A session wired from the pod's environment: checkpoints in DTJ_CHECKPOINT_DIR, SIGTERM budget
    DTJ_PREEMPTION_BUDGET_SECONDS, metrics on DTJ_METRICS_PORT from rank 0, progress reports to the
    operator (DTJ_PROGRESS_URL) from every rank; `total_steps` gives the operator a percent and an ETA.

    Under in-place restarts (DTJ_ATTEMPT_FILE) with a replicated model, each rank keeps its newest
    checkpoint in host memory for the next round to resume from (held_checkpoint.py) unless
    `checkpoint_in_memory` is False (a copy of the model and optimizer a rank is too much)."""
    if env.checkpoint_dir is None:
        raise TrainerEnvironmentError("DTJ_CHECKPOINT_DIR (or AIP_CHECKPOINT_DIR) is not set")
    with ExitStack() as stack:
        termination = stack.enter_context(
            TerminationSignal(env.preemption_budget_s, env.termination_message_path)
        )
        reporter = None
        if context.is_rank_zero and env.metrics_port is not None:
            reporter = stack.enter_context(ProgressReporter(env.metrics_port, attempt=env.attempt))
        poster = ProgressPoster.from_environ(total_steps=total_steps)
        own_time = None
        if poster is not None:
            stack.enter_context(poster)
            own_time = OwnStepClock.attach(state.model, context.device)
        in_place = env.attempt_file is not None
        checkpoints = CheckpointManager(
            env.checkpoint_dir,
            context,
            keep_last=keep_last,
            layout=checkpoint_layout,
            hold_in_memory=in_place and checkpoint_in_memory and checkpoint_layout == "replicated",
        )
        stack.callback(checkpoints.close)
        yield TrainingSession(
            context,
            state,
            checkpoints,
            termination,
            checkpoint_every_steps=checkpoint_every_steps,
            reporter=reporter,
            poster=poster,
            asynchronous_checkpoints=asynchronous_checkpoints,
            own_time=own_time,
            in_place=in_place,
        )
