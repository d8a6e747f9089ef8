"""What a training run is made of, as far as resuming it is concerned."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


@dataclass
class TrainingProgress:
    epoch: int = 0
    step: int = 0  # optimizer steps completed, over all epochs
    batches_in_epoch: int = 0  # batches of `epoch` already trained on: the sampler's position


@dataclass
class TrainingState:
    model: nn.Module  # as trained: plain, wrapped in DistributedDataParallel, or sharded with fully_shard
    optimizer: Optimizer
    scheduler: LRScheduler | None = None
    progress: TrainingProgress = field(default_factory=TrainingProgress)
