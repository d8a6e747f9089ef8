"""The newest checkpoint at hand: kept in this process's memory across in-place rounds, handed to a rank
that has none over the process group.

Under runPolicy.restartStrategy InPlace a round that ends keeps the process (rounds.train_in_rounds),
so what the last save wrote is still in its memory when the next round resumes. A replicated model
(DDP) has the same checkpoint on every rank: each rank keeps its own copy, so losing any one pod (or
node) loses no copy. On resume the survivors load theirs and a rank that has none (a new pod, a hot
spare) receives it from the lowest rank that has it, over the job's network: no one reads the shared
volume, which stays the durable copy and the only truth of which step is the newest (a copy is used
only when its step is the one `latest` names).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from dtjob_trainer.pytorch.distributed import DistributedContext


@dataclass(frozen=True)
class HeldCheckpoint:
    step: int
    trainer_state: dict[str, Any]
    """On the host, owned here: never loaded into a model as is (an optimizer keeps the tensors it
    loads, and training would then change the copy); see `copy_of`."""


# By checkpoint directory, for the life of the process: a round's CheckpointManager is new, the process
# is not.
_held: dict[Path, HeldCheckpoint] = {}


def hold(root: Path, step: int, trainer_state: dict[str, Any]) -> None:
    """Keep `trainer_state` (a host copy no one else changes) as the checkpoint of `step` under `root`."""
    _held[root] = HeldCheckpoint(step, trainer_state)


def held_step(root: Path) -> int | None:
    held = _held.get(root)
    return held.step if held is not None else None


def shared_copy(
    root: Path, step: int, holders: list[bool], context: DistributedContext
) -> tuple[dict[str, Any], str]:
    """Collective: the checkpoint of `step` as a state to load (a copy), and where it came from. Ranks
    that hold it use their own; the others receive the lowest holder's. `holders`: whether each rank
    holds `step` (agreed by all); at least one does."""
    held = _held.get(root)
    if not all(holders):
        source = holders.index(True)
        payload = _serialized(held.trainer_state) if context.rank == source and held is not None else None
        received = _broadcast_bytes(payload, source, context)
        if not holders[context.rank]:
            # weights_only: a peer's bytes load as the volume's files do, never as code.
            trainer_state = torch.load(io.BytesIO(received), map_location="cpu", weights_only=True)
            hold(root, step, trainer_state)
            return copy_of(trainer_state), f"rank {source}'s memory"
    assert held is not None and held.step == step
    return copy_of(held.trainer_state), "this process's memory"


def copy_of(value: Any) -> Any:
    """`value` with every tensor copied to the host (containers rebuilt, other leaves shared)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: copy_of(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(copy_of(item) for item in value)
    return value


def _serialized(trainer_state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(trainer_state, buffer)
    return buffer.getvalue()


def _broadcast_bytes(payload: bytes | None, source: int, context: DistributedContext) -> bytes:
    """`payload` from rank `source` to every rank, as tensors on the process group's device (NCCL sends
    only GPU tensors)."""
    size = torch.tensor(
        [len(payload) if payload is not None else 0], dtype=torch.int64, device=context.device
    )
    dist.broadcast(size, src=source)
    if payload is not None:
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(context.device)
    else:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=context.device)
    dist.broadcast(data, src=source)
    return data.cpu().numpy().tobytes()
