"""The newest checkpoint at hand: kept in this process's memory across in-place rounds, handed to a rank
that has none over the process group.

Under runPolicy.restartStrategy InPlace a round that ends keeps the process (rounds.train_in_rounds),
so what the last save wrote is still in its memory when the next round resumes. A replicated model
(DDP) has the same checkpoint on every rank: each rank keeps its own copy, so losing any one pod (or
node) loses no copy. On resume the survivors load theirs and a rank that has none (a new pod, a hot
spare) receives it from a rank that has it, over the job's network: no one reads the shared
volume, which stays the durable copy and the only truth of which step is the newest (a copy is used
only when its step is the one `latest` names).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

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
    that hold it use their own; each of the others receives one holder's, the ranks without a copy spread
    over the holders (only those pairs talk). `holders`: whether each rank holds `step` (agreed by all);
    at least one does."""
    giver_of = givers(holders)
    if context.rank in giver_of:
        giver = giver_of[context.rank]
        trainer_state = received_copy(giver, context)
        hold(root, step, trainer_state)
        return copy_of(trainer_state), f"rank {giver}'s memory"
    held = _held.get(root)
    assert held is not None and held.step == step
    for rank, giver in giver_of.items():
        if giver == context.rank:
            send_copy(held.trainer_state, rank, context)
    return copy_of(held.trainer_state), "this process's memory"


def givers(holders: list[bool]) -> dict[int, int]:
    """Which holder sends its copy to each rank without one: the ranks without one in turn over the
    holders, so that no holder sends more than its share."""
    holding = [rank for rank, holds in enumerate(holders) if holds]
    lacking = [rank for rank, holds in enumerate(holders) if not holds]
    return {rank: holding[i % len(holding)] for i, rank in enumerate(lacking)}


def copy_of(value: Any) -> Any:
    """`value` with every tensor copied to the host (containers rebuilt, other leaves shared)."""
    return _mapped(value, lambda tensor: tensor.detach().to("cpu", copy=True))


# The most one message of a transfer holds: what a transfer takes of the GPU's memory on either side.
CHUNK_BYTES = 256 * 2**20


def send_copy(
    trainer_state: dict[str, Any], to: int, context: DistributedContext, chunk_bytes: int = CHUNK_BYTES
) -> None:
    """Send `trainer_state` to rank `to`, which calls `received_copy`: its layout (the state with each
    tensor replaced by an empty one of the same shape and type), then the tensors' data in chunks packed
    by type, as tensors on the process group's device (NCCL sends only GPU tensors)."""
    tensors: list[torch.Tensor] = []

    def slot(tensor: torch.Tensor) -> torch.Tensor:
        tensors.append(tensor.detach().reshape(-1))  # a view, unless the tensor is not contiguous
        return torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")

    buffer = io.BytesIO()
    torch.save(_mapped(trainer_state, slot), buffer)
    layout = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    dist.send(torch.tensor([layout.numel()], device=context.device), dst=to)
    dist.send(layout.to(context.device), dst=to)
    for chunk, parts in _chunks(tensors, context.device, chunk_bytes):
        for tensor, start, end, offset in parts:
            chunk[offset : offset + end - start].copy_(tensor[start:end])
        dist.send(chunk, dst=to)


def received_copy(source: int, context: DistributedContext, chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """The trainer state rank `source` sends with `send_copy`, on the host."""
    size = torch.empty(1, dtype=torch.int64, device=context.device)
    dist.recv(size, src=source)
    layout_bytes = torch.empty(int(size.item()), dtype=torch.uint8, device=context.device)
    dist.recv(layout_bytes, src=source)
    # weights_only: a peer's bytes load as the volume's files do, never as code.
    layout = torch.load(io.BytesIO(layout_bytes.cpu().numpy().tobytes()), weights_only=True)
    slots: list[torch.Tensor] = []
    _mapped(layout, slots.append)
    received = [torch.empty(slot.shape, dtype=slot.dtype) for slot in slots]
    for chunk, parts in _chunks(received, context.device, chunk_bytes):
        dist.recv(chunk, src=source)
        on_host = chunk.cpu()
        for tensor, start, end, offset in parts:
            tensor.view(-1)[start:end].copy_(on_host[offset : offset + end - start])
    filled = iter(received)
    return cast(dict[str, Any], _mapped(layout, lambda _: next(filled)))


# A range of a tensor's elements (in storage order) and where it starts in its chunk.
_Part = tuple[torch.Tensor, int, int, int]


def _chunks(
    tensors: list[torch.Tensor], device: torch.device, chunk_bytes: int
) -> Iterator[tuple[torch.Tensor, list[_Part]]]:
    """Buffers on `device` of at most `chunk_bytes`, each for consecutive ranges of tensors of one type
    (types in order of first appearance), and the ranges each holds: the same on the sending and the
    receiving side for tensors of the same shapes and types."""
    for dtype in dict.fromkeys(tensor.dtype for tensor in tensors):
        capacity = max(1, chunk_bytes // torch.empty(0, dtype=dtype).element_size())
        parts: list[_Part] = []
        filled = 0
        for tensor in (t for t in tensors if t.dtype == dtype):
            start = 0
            while start < tensor.numel():
                end = min(tensor.numel(), start + capacity - filled)
                parts.append((tensor, start, end, filled))
                filled += end - start
                start = end
                if filled == capacity:
                    yield torch.empty(filled, dtype=dtype, device=device), parts
                    parts, filled = [], 0
        if parts:
            yield torch.empty(filled, dtype=dtype, device=device), parts


def _mapped(value: Any, tensor_map: Callable[[torch.Tensor], Any]) -> Any:
    """`value` with `tensor_map` applied to each tensor, in a fixed order (containers rebuilt, other
    leaves shared)."""
    if isinstance(value, torch.Tensor):
        return tensor_map(value)
    if isinstance(value, dict):
        return {key: _mapped(item, tensor_map) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_mapped(item, tensor_map) for item in value)
    return value
