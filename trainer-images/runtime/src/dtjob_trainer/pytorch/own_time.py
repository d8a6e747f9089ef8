"""How long each step of this rank takes before it first hands gradients to the all-reduce: its own work
(loading the batch, the forward pass, the backward pass up to the first gradient bucket), without the
time it then waits for its peers.

In synchronous data parallelism every rank's step lasts as long as the slowest rank's, so step times
cannot tell which rank is slow; this can: the slow rank's own time is long, its peers' stays short (they
wait in the all-reduce instead). Each rank reports it (ownStepSeconds) and the operator names a rank
whose own time stays well above the rest of the gang's (docs/progress.md#slow-ranks).

Measured through a DDP communication hook on the CPU (gloo). On a GPU the host runs ahead of the device,
so the time would have to be taken with CUDA events: not built, and nothing is reported there.
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations against the real types.
import time
from collections import deque
from typing import Any, Final

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

WINDOW_STEPS: Final = 20


class OwnStepClock:
    def __init__(self) -> None:
        self._started: float | None = None
        self._handed: float | None = None
        self._window: deque[float] = deque(maxlen=WINDOW_STEPS)

    @classmethod
    def attach(cls, model: nn.Module, device: torch.device) -> "OwnStepClock | None":
        """A clock hooked into `model`'s gradient all-reduce; None where it cannot be: not DDP, not on the
        CPU, or the script registered a communication hook of its own (DDP takes one)."""
        if device.type != "cpu" or not isinstance(model, DistributedDataParallel):
            return None
        clock = cls()
        try:
            model.register_comm_hook(None, clock._hook)
        except RuntimeError:
            return None
        return clock

    def _hook(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if self._handed is None:
            self._handed = time.monotonic()
        return default_hooks.allreduce_hook(state, bucket)

    def step_done(self) -> float | None:
        """Seconds of own work a step, averaged over the last WINDOW_STEPS steps, the one just finished
        included (the first step, with its start-up, is not counted)."""
        if self._started is not None and self._handed is not None:
            self._window.append(max(0.0, self._handed - self._started))
        self._handed = None
        return sum(self._window) / len(self._window) if self._window else None

    def next_step(self) -> None:
        """The next step starts now (after this one's checkpoint save, which is nobody's own work)."""
        self._started = time.monotonic()
        self._handed = None
