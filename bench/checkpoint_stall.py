"""How long training stalls for a checkpoint: synchronous save vs asynchronous save of the same state.

    .venv/bin/python -m bench.checkpoint_stall [--state-mb 100] [--repeats 5] [--directory DIR]

One process (world size 1, gloo). The state is an MLP and its SGD momentum, about --state-mb in all.
"Stall" is the time `save` / `save_async` blocks the training loop; for the asynchronous save the
time until the checkpoint is durable is printed too. The directory should be on the disk checkpoints
go to in production (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from dtjob_trainer.environment import TorchRendezvous
from dtjob_trainer.pytorch.checkpoint import CheckpointManager
from dtjob_trainer.pytorch.distributed import DistributedContext, distributed
from dtjob_trainer.pytorch.state import TrainingState
from torch import nn

# Parameters plus one momentum buffer of the same size, float32.
BYTES_PER_PARAMETER = 2 * 4


def model_of_size(state_mb: float) -> nn.Sequential:
    """Square layers of 2048 units, as many as make the parameters + momentum about `state_mb`."""
    width = 2048
    layers = max(1, round(state_mb * 2**20 / BYTES_PER_PARAMETER / (width * width + width)))
    return nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))


def trained_state(state_mb: float) -> TrainingState:
    model = model_of_size(state_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(4, 2048)).sum().backward()
    optimizer.step()  # creates the momentum buffers
    return TrainingState(model, optimizer)


def state_bytes(state: TrainingState) -> int:
    tensors = [*state.model.state_dict().values()]
    tensors += [value for entry in state.optimizer.state.values() for value in entry.values()]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def measure(
    save: Callable[[TrainingState], None], manager: CheckpointManager, state: TrainingState
) -> tuple[float, float]:
    """(seconds the call blocked, seconds until the checkpoint was durable)"""
    state.progress.step += 1
    started = time.perf_counter()
    save(state)
    stalled = time.perf_counter() - started
    manager.wait()
    return stalled, time.perf_counter() - started


def run(context: DistributedContext, directory: Path, state_mb: float, repeats: int) -> None:
    state = trained_state(state_mb)
    manager = CheckpointManager(directory, context, keep_last=2)
    print(f"state: {state_bytes(state) / 2**20:.0f} MiB (model + SGD momentum), directory: {directory}")
    print(f"{'mode':<14}{'stall median':>14}{'stall min':>12}{'durable median':>16}")
    for label, save in (("synchronous", manager.save), ("asynchronous", manager.save_async)):
        measure(save, manager, state)  # warm-up: first write of the files, allocator
        samples = [measure(save, manager, state) for _ in range(repeats)]
        stalls, durable = [s for s, _ in samples], [d for _, d in samples]
        print(
            f"{label:<14}{statistics.median(stalls):>13.3f}s{min(stalls):>11.3f}s{statistics.median(durable):>15.3f}s"
        )
    manager.close()


def state_arguments(description: str | None, state_mb: float, repeats: int) -> argparse.ArgumentParser:
    """The command line the checkpoint benchmarks share: the state's size, how many times to measure."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--state-mb", type=float, default=state_mb)
    parser.add_argument("--repeats", type=int, default=repeats)
    return parser


def main() -> None:
    parser = state_arguments(__doc__, state_mb=100, repeats=5)
    parser.add_argument("--directory", type=Path)
    args = parser.parse_args()
    torch.manual_seed(0)
    alone = TorchRendezvous("127.0.0.1", 0, world_size=1, rank=0, local_rank=0)
    with distributed(alone, rendezvous_timeout_s=10) as context, tempfile.TemporaryDirectory() as scratch:
        run(context, args.directory or Path(scratch), args.state_mb, args.repeats)


if __name__ == "__main__":
    main()
