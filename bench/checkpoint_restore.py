"""How long a resume waits for its checkpoint: read from the volume, taken from the copy this process
holds (restartStrategy InPlace, docs/fault-tolerance.md#the-checkpoint-at-hand), or received from a
peer's held copy over the process group.

    .venv/bin/python -m bench.checkpoint_restore [--state-mb 1000] [--repeats 3] [--directory DIR] [--drop-caches]

"the volume" and "own memory": one process (world size 1), NCCL with the model on the GPU where one is
visible, gloo and the CPU otherwise. "a peer": two local processes over gloo on the CPU (one GPU cannot
hold two NCCL ranks), rank 0 holding the checkpoint and rank 1 not (a new pod, a hot spare); the figure
is rank 1's restore. Every restore is followed by a bitwise comparison of the model and optimizer with
what was saved (the live state having been changed first); the bench stops with an error on any
difference. --drop-caches (root) empties the page cache before each read from the volume, as a read from
network storage would find it.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from multiprocessing import Queue
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from dtjob_trainer.environment import TorchRendezvous
from dtjob_trainer.pytorch import held_checkpoint
from dtjob_trainer.pytorch.checkpoint import CheckpointManager
from dtjob_trainer.pytorch.distributed import DistributedContext, distributed
from dtjob_trainer.pytorch.state import TrainingState
from torch.multiprocessing import spawn

from bench.checkpoint_stall import model_of_size, state_arguments, state_bytes


def trained_state(state_mb: float, device: torch.device) -> TrainingState:
    model = model_of_size(state_mb).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(4, 2048, device=device)).sum().backward()
    optimizer.step()  # creates the momentum buffers
    return TrainingState(model, optimizer)


def host_copy(state: TrainingState) -> dict[str, Any]:
    return held_checkpoint.copy_of(
        {"model": state.model.state_dict(), "optimizer": state.optimizer.state_dict()}
    )


def changed(state: TrainingState) -> None:
    """Move the live state away from the saved one, so that a restore that loads nothing is caught."""
    with torch.no_grad():
        for parameter in state.model.parameters():
            parameter.add_(1.0)
    for entry in state.optimizer.state.values():
        entry["momentum_buffer"].zero_()


def same(saved: Any, restored: Any) -> bool:
    if isinstance(saved, torch.Tensor):
        return bool(torch.equal(saved, restored))
    if isinstance(saved, dict):
        return saved.keys() == restored.keys() and all(same(saved[k], restored[k]) for k in saved)
    if isinstance(saved, list | tuple):
        return len(saved) == len(restored) and all(same(a, b) for a, b in zip(saved, restored, strict=True))
    return bool(saved == restored)


def synchronized(context: DistributedContext) -> None:
    if context.device.type == "cuda":
        torch.cuda.synchronize(context.device)


def timed(context: DistributedContext, action: Callable[[], None]) -> float:
    synchronized(context)
    started = time.perf_counter()
    action()
    synchronized(context)
    return time.perf_counter() - started


def drop_page_cache() -> None:
    with open("/proc/sys/vm/drop_caches", "w") as caches:
        caches.write("3\n")


def volume_and_own_memory(
    context: DistributedContext, directory: Path, state_mb: float, repeats: int, drop_caches: bool
) -> None:
    state = trained_state(state_mb, context.device)
    saved = host_copy(state)
    holding = CheckpointManager(directory, context, keep_last=1, hold_in_memory=True)
    save_s = timed(context, lambda: holding.save(state))
    print(
        f"state: {state_bytes(state) / 2**20:.0f} MiB (model + SGD momentum) on {context.device}, "
        f"{context.backend}; directory: {directory}"
    )
    print(f"save (held copy to the host, written, published): {save_s:.3f} s")
    print(f"{'restore from':<14}{'median':>10}{'min':>10}{'max':>10}   bitwise")

    def from_volume() -> None:
        if drop_caches:
            drop_page_cache()
        CheckpointManager(directory, context, keep_last=1).restore_latest(state)

    for label, restore in (
        ("the volume", from_volume),
        ("own memory", lambda: holding.restore_latest(state)),
    ):
        samples = []
        for _ in range(repeats):
            changed(state)
            samples.append(timed(context, restore))
            if not same(saved, host_copy(state)):
                raise SystemExit(f"restoring from {label} gave another state than the one saved")
        report(label, samples)
    holding.close()


def peer_rank(
    rank: int, port: int, directory: Path, state_mb: float, repeats: int, results: Queue[float]
) -> None:
    """One of the two processes of the "a peer" row: rank 0 holds each checkpoint, rank 1 receives it."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # gloo: both processes on the CPU
    rendezvous = TorchRendezvous("127.0.0.1", port, world_size=2, rank=rank, local_rank=0)
    with distributed(rendezvous, rendezvous_timeout_s=30) as context:
        torch.manual_seed(0)
        state = trained_state(state_mb, context.device)
        saved = host_copy(state)
        for repeat in range(repeats):
            # A new directory each time: rank 1 holds what it received under the last one.
            manager = CheckpointManager(directory / f"peer-{repeat}", context, hold_in_memory=rank == 0)
            manager.save(state)
            changed(state)
            dist.barrier()
            started = time.perf_counter()
            manager.restore_latest(state)
            if rank == 1:
                results.put(time.perf_counter() - started)
            if not same(saved, host_copy(state)):
                raise SystemExit(f"rank {rank}: restoring from a peer gave another state than the one saved")
            manager.close()


def from_a_peer(directory: Path, state_mb: float, repeats: int) -> None:
    results: Queue[float] = multiprocessing.get_context("spawn").Queue()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spawn(peer_rank, args=(port, directory, state_mb, repeats, results), nprocs=2)
    report("a peer", [results.get() for _ in range(repeats)])


def report(label: str, samples: list[float]) -> None:
    print(
        f"{label:<14}{statistics.median(samples):>9.3f}s{min(samples):>9.3f}s{max(samples):>9.3f}s   identical"
    )


def main() -> None:
    parser = state_arguments(__doc__, state_mb=1000, repeats=3)
    parser.add_argument("--directory", type=Path)
    parser.add_argument("--drop-caches", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    alone = TorchRendezvous("127.0.0.1", 0, world_size=1, rank=0, local_rank=0)
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.directory or Path(scratch)
        with distributed(alone, rendezvous_timeout_s=10) as context:
            volume_and_own_memory(context, directory / "alone", args.state_mb, args.repeats, args.drop_caches)
        from_a_peer(directory, args.state_mb, args.repeats)


if __name__ == "__main__":
    main()
