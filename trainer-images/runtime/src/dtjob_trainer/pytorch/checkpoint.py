"""Save and resume everything a run needs to continue exactly where it stopped.

A checkpoint holds the model, the optimizer, the LR scheduler, the progress (epoch, step, sampler
position) and the RNG states of every rank. Layout and atomicity: checkpoint_files.CheckpointDirectory.

- Replicated models (one process, or DistributedDataParallel): rank 0 writes `trainer.pt`; every rank
  loads it. `save_async` copies the state to host memory and lets a background thread write it, so
  training stalls only for the copy. With `hold_in_memory` (in-place restarts) every rank also keeps
  a host copy of what it saved, and a resume reads the newest checkpoint from there
  (held_checkpoint.py) rather than from the volume.
- Sharded models (FSDP2 `fully_shard`, tensor parallel DTensors, a pipeline stage per rank): every rank
  writes its own shards with torch.distributed.checkpoint into the same directory and rank 0 adds
  `trainer.pt` with the rest; every rank loads its shards (DCP reshards if the world size changed).
- DeepSpeed engines: the engine writes the module and every rank's ZeRO partition of the optimizer
  (`save_checkpoint`, tag `deepspeed`) and rank 0 adds `trainer.pt`; the engine reads them back.

Every public method is collective: call it on all ranks, in the same order.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as load_shards
from torch.distributed.checkpoint.state_dict_saver import save as save_shards
from torch.nn.parallel import DistributedDataParallel

from dtjob_trainer.checkpoint_files import CheckpointDirectory
from dtjob_trainer.pytorch import held_checkpoint
from dtjob_trainer.pytorch.distributed import DistributedContext
from dtjob_trainer.pytorch.held_checkpoint import copy_of
from dtjob_trainer.pytorch.rng import capture_rng_state, restore_rng_state
from dtjob_trainer.pytorch.state import TrainingProgress, TrainingState

log = logging.getLogger(__name__)

TRAINER_STATE_FILE = "trainer.pt"
FORMAT_VERSION = 1
# Who writes the model and the optimizer: rank 0 (replicated), every rank through
# torch.distributed.checkpoint (sharded), or a DeepSpeed engine.
CheckpointLayout = Literal["replicated", "sharded", "deepspeed"]
ENGINE_TAG = "deepspeed"
# The optimizer's state keyed by parameter name throughout (param_groups too): DCP keeps one copy of a
# key all ranks write, so a nested param_groups list, different on each pipeline stage, would be saved
# from rank 0 alone and loaded into every stage.
SHARDED_STATE = StateDictOptions(flatten_optimizer_state_dict=True)


class CheckpointingEngine(Protocol):
    """What a DeepSpeed engine (deepspeed.DeepSpeedEngine, the model it trains) offers for checkpoints."""

    def save_checkpoint(self, save_dir: str, tag: str, *, save_latest: bool) -> bool: ...

    def load_checkpoint(self, load_dir: str, tag: str) -> tuple[str | None, dict[str, Any] | None]: ...


class CheckpointManager:
    def __init__(
        self,
        root: Path,
        context: DistributedContext,
        *,
        keep_last: int = 3,
        layout: CheckpointLayout = "replicated",
        hold_in_memory: bool = False,
    ) -> None:
        """`hold_in_memory`: keep a host copy of the newest checkpoint in this process for the next
        round to resume from (held_checkpoint.py); replicated models only."""
        if hold_in_memory and layout != "replicated":
            raise ValueError(f"checkpoints are held in memory for replicated models only, not {layout} ones")
        self.files = CheckpointDirectory(root, keep_last)
        self._context = context
        self._layout = layout
        self._hold = hold_in_memory
        self._writer: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        # The step whose checkpoint is (being) written by this process: saving it again is a no-op.
        self._saved_step: int | None = None
        # Rank 0 only: the newest step that is durable on disk.
        self.published_step: int | None = None
        if context.is_rank_zero:
            root.mkdir(parents=True, exist_ok=True)
            self.files.discard_partials()

    def save(self, state: TrainingState) -> None:
        """Write a checkpoint of the current step; returns on every rank once it is published."""
        self.wait()
        step = state.progress.step
        if step == self._saved_step:
            return
        if self._layout != "replicated":
            self._save_by_every_rank(state)
        else:
            trainer_state = self._trainer_state(state)
            if self._hold:
                trainer_state = copy_of(trainer_state)
                held_checkpoint.hold(self.files.root, step, trainer_state)
            if self._context.is_rank_zero:
                self._write(step, trainer_state)
            dist.barrier()
        self._saved_step = step

    def save_async(self, state: TrainingState) -> None:
        """Copy the current step's state to host memory; rank 0 writes and publishes it in the background.

        Only one save is in flight: a second call, `save` and `wait` first wait for the previous one.
        """
        if self._layout != "replicated":
            raise ValueError("asynchronous saves are implemented for replicated models only")
        self.wait()
        step = state.progress.step
        if step == self._saved_step:
            return
        trainer_state = self._trainer_state(state)
        if self._hold:
            # Training goes on mutating the live tensors (CPU state dicts alias the parameters).
            trainer_state = copy_of(trainer_state)
            held_checkpoint.hold(self.files.root, step, trainer_state)
        if self._context.is_rank_zero:
            snapshot = trainer_state if self._hold else copy_of(trainer_state)
            if self._writer is None:
                self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
            self._pending = self._writer.submit(self._write, step, snapshot)
        self._saved_step = step

    def wait(self) -> None:
        """Block until the background save, if any, is published; re-raise its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def restore_latest(self, state: TrainingState) -> int | None:
        """Load the newest published checkpoint into `state`; its step, or None when there is none."""
        step, holders = self._agreed_latest_step()
        if step is None:
            return None
        path = self.files.path_for(step)
        if any(holders):
            trainer_state, source = held_checkpoint.shared_copy(self.files.root, step, holders, self._context)
        else:
            trainer_state, source = self._read(step)
        if trainer_state["format"] != FORMAT_VERSION:
            raise ValueError(
                f"{path} has checkpoint format {trainer_state['format']}, expected {FORMAT_VERSION}"
            )
        if self._layout == "deepspeed":
            loaded, _ = cast(CheckpointingEngine, state.model).load_checkpoint(str(path), tag=ENGINE_TAG)
            if loaded is None:
                raise ValueError(f"{path} has no DeepSpeed checkpoint under the tag {ENGINE_TAG}")
        elif self._layout == "sharded":
            # DCP loads in place into the tensors of these state dicts, resharding as needed.
            model_state, optimizer_state = get_state_dict(state.model, state.optimizer, options=SHARDED_STATE)
            load_shards({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)
            set_state_dict(
                state.model,
                state.optimizer,
                model_state_dict=model_state,
                optim_state_dict=optimizer_state,
                options=SHARDED_STATE,
            )
        else:
            _unwrapped(state.model).load_state_dict(trainer_state["model"])
            state.optimizer.load_state_dict(trainer_state["optimizer"])
        if state.scheduler is not None:
            state.scheduler.load_state_dict(trainer_state["scheduler"])
        state.progress = TrainingProgress(**trainer_state["progress"])
        rng_by_rank = trainer_state["rng_by_rank"]
        if len(rng_by_rank) == self._context.world_size:
            restore_rng_state(rng_by_rank[self._context.rank])
        else:  # the gang changed size: a rank's old stream has no meaning for a different rank layout
            log.warning(
                "checkpoint has RNG states of %d ranks, world size is %d: RNG states not restored",
                len(rng_by_rank),
                self._context.world_size,
            )
        self._saved_step = step
        self.published_step = step if self._context.is_rank_zero else None
        log.info(
            "resumed from %s (epoch %d, step %d), read from %s", path, state.progress.epoch, step, source
        )
        return step

    def _agreed_latest_step(self) -> tuple[int | None, list[bool]]:
        """Rank 0 reads `latest` and tells the others, so all ranks load the same checkpoint; and
        whether each rank holds that step in memory (none does unless held)."""
        held = held_checkpoint.held_step(self.files.root) if self._hold else None
        mine = (self.files.latest_step() if self._context.is_rank_zero else None, held)
        everyone: list[Any] = [None] * self._context.world_size
        dist.all_gather_object(everyone, mine)
        latest = everyone[0][0]
        return latest, [latest is not None and step == latest for _, step in everyone]

    def _read(self, step: int) -> tuple[dict[str, Any], str]:
        """The trainer state of `step`'s checkpoint from the volume (and a copy held, when held)."""
        path = self.files.path_for(step) / TRAINER_STATE_FILE
        trainer_state = torch.load(path, map_location="cpu", weights_only=True)
        if self._hold:
            held_checkpoint.hold(self.files.root, step, copy_of(trainer_state))
        return trainer_state, "the volume"

    def _trainer_state(self, state: TrainingState) -> dict[str, Any]:
        """What rank 0 writes to trainer.pt (all of it unless sharded); collective: it gathers every
        rank's RNG state."""
        rng_by_rank: list[Any] = [None] * self._context.world_size
        dist.all_gather_object(rng_by_rank, capture_rng_state())
        trainer_state: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "progress": asdict(state.progress),
            "scheduler": state.scheduler.state_dict() if state.scheduler is not None else None,
            "rng_by_rank": rng_by_rank,
        }
        if self._layout == "replicated":
            trainer_state["model"] = _unwrapped(state.model).state_dict()
            trainer_state["optimizer"] = state.optimizer.state_dict()
        return trainer_state

    def _write(self, step: int, trainer_state: dict[str, Any]) -> None:
        staging = self.files.begin(step)
        torch.save(trainer_state, staging / TRAINER_STATE_FILE)
        self.files.publish(step)
        self.published_step = step

    def _save_by_every_rank(self, state: TrainingState) -> None:
        step = state.progress.step
        staging = self.files.staging_path(step)
        if self._context.is_rank_zero:
            self.files.begin(step)
        dist.barrier()  # the staging directory exists before any rank writes into it
        if self._layout == "deepspeed":
            engine = cast(CheckpointingEngine, state.model)
            engine.save_checkpoint(str(staging), tag=ENGINE_TAG, save_latest=False)
        else:
            model_state, optimizer_state = get_state_dict(state.model, state.optimizer, options=SHARDED_STATE)
            save_shards({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=staging)
        trainer_state = self._trainer_state(state)
        if self._context.is_rank_zero:
            torch.save(trainer_state, staging / TRAINER_STATE_FILE)
            self.files.publish(step)
            self.published_step = step
        dist.barrier()

    def close(self) -> None:
        self.wait()
        if self._writer is not None:
            self._writer.shutdown()


def _unwrapped(model: nn.Module) -> nn.Module:
    """The module whose state dict is the model's (DDP only adds a `module.` prefix)."""
    return model.module if isinstance(model, DistributedDataParallel) else model
