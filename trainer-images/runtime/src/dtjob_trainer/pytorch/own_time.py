"""How long each step of this rank takes before it first hands gradients to the all-reduce: its own work
(loading the batch, the forward pass, the backward pass up to the first gradient bucket), without the
time it then waits for its peers.

In synchronous data parallelism every rank's step lasts as long as the slowest rank's, so step times
cannot tell which rank is slow; this can: the slow rank's own time is long, its peers' stays short (they
wait in the all-reduce instead). Each rank reports it (ownStepSeconds) and the operator names a rank
whose own time stays well above the rest of the gang's (docs/progress.md#slow-ranks).

Both ends of the span are marked by a DDP communication hook (the hand-off) and `next_step` (the start).
On the CPU (gloo) the host does the work as it goes, so its clock times it. On a GPU the host only
queues the work and runs ahead of the device: its clock would stop long before the device is done. There
each end is a CUDA event recorded on the step's stream, and a step's pair is read once the device has
passed its hand-off (`Event.query`), at the first `step_done` after that: at once where the loop waits
for the device every step (`loss.item()`, the session's stop flag), later where it does not. Nothing
waits for the device here.
"""

# No `from __future__ import annotations`: DDP checks the hook's annotations against the real types.
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Literal, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

WINDOW_STEPS: Final = 20

ClockKind = Literal["host", "cuda"]


class Mark(Protocol):
    """A point in a step, as a CUDA event is one: whether the work before it is done, and the
    milliseconds from it to a later mark."""

    def query(self) -> bool: ...

    def elapsed_time(self, end: Any) -> float: ...


class HostMark:
    """The host's clock, read when marked: done at once."""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at = time.monotonic()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "HostMark") -> float:
        return (end._at - self._at) * 1000.0


def cuda_marks(device: torch.device) -> Callable[[], Mark]:
    """Marks on `device`'s current stream (the step's: DDP's hook runs on the stream of the backward)."""

    def mark() -> Mark:
        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record(torch.cuda.current_stream(device))
        return event

    return mark


def clock_kind(device: torch.device) -> ClockKind | None:
    """Which clock times own work on `device`: the host's on the CPU, CUDA events on a GPU (the host runs
    ahead of it); None elsewhere."""
    if device.type == "cpu":
        return "host"
    if device.type == "cuda":
        return "cuda"
    return None


class OwnStepClock:
    def __init__(self, mark: Callable[[], Mark] = HostMark) -> None:
        self._mark = mark
        self._started: Mark | None = None
        self._handed: Mark | None = None
        # Steps whose device work may still be under way, oldest first. A host more than a window ahead
        # of its device drops the oldest: the window would not keep them anyway.
        self._pending: deque[tuple[Mark, Mark]] = deque(maxlen=WINDOW_STEPS)
        self._window: deque[float] = deque(maxlen=WINDOW_STEPS)

    @classmethod
    def attach(cls, model: nn.Module, device: torch.device) -> "OwnStepClock | None":
        """A clock hooked into `model`'s gradient all-reduce; None where it cannot be: not DDP, neither
        on the CPU nor on a GPU, or the script registered a communication hook of its own (DDP takes one)."""
        kind = clock_kind(device)
        if kind is None or not isinstance(model, DistributedDataParallel):
            return None
        clock = cls(HostMark if kind == "host" else cuda_marks(device))
        try:
            model.register_comm_hook(None, clock._hook)
        except RuntimeError:
            return None
        return clock

    def _hook(self, state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        self.handed()
        return default_hooks.allreduce_hook(state, bucket)

    def handed(self) -> None:
        """Gradients are handed to the all-reduce now; the step's first hand-off ends its own work."""
        if self._handed is None:
            self._handed = self._mark()

    def step_done(self) -> float | None:
        """Seconds of own work a step, averaged over the last WINDOW_STEPS steps the device has done (on
        the CPU, the one just finished included; the first step, with its start-up, is not counted)."""
        if self._started is not None and self._handed is not None:
            self._pending.append((self._started, self._handed))
        self._started = self._handed = None
        # A stream does its work in order: the first pair not done yet holds back the ones after it.
        while self._pending and self._pending[0][1].query():
            started, handed = self._pending.popleft()
            self._window.append(max(0.0, started.elapsed_time(handed) / 1000.0))
        return sum(self._window) / len(self._window) if self._window else None

    def next_step(self) -> None:
        """The next step starts now (after this one's checkpoint save, which is nobody's own work)."""
        self._started = self._mark()
        self._handed = None
