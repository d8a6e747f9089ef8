"""The runtime's own step clock in one process: which clock a device gets, the host clock under a real
DDP hook (gloo), and the CUDA-event path's bookkeeping with stand-in events (a GPU's own figures:
bench/gpu_check.py; between ranks: test_progress_report.py's slow rank)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from dtjob_trainer.environment import TorchRendezvous
from dtjob_trainer.pytorch.distributed import DistributedContext, init_distributed
from dtjob_trainer.pytorch.own_time import WINDOW_STEPS, OwnStepClock, clock_kind
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class StandInStream:
    """A device stream as the host sees it: work queued up to `queued_ms`, done up to `done_ms`."""

    def __init__(self) -> None:
        self.queued_ms = 0.0
        self.done_ms = 0.0

    def mark(self) -> StandInEvent:
        return StandInEvent(self, self.queued_ms)

    def queue(self, ms: float) -> None:
        self.queued_ms += ms


class StandInEvent:
    def __init__(self, stream: StandInStream, at_ms: float) -> None:
        self.stream, self.at_ms = stream, at_ms

    def query(self) -> bool:
        return self.stream.done_ms >= self.at_ms

    def elapsed_time(self, end: StandInEvent) -> float:
        # CUDA raises on an event the device has not reached: the clock must never ask.
        assert self.query() and end.query(), "read before the device got there"
        return end.at_ms - self.at_ms


def step(clock: OwnStepClock, stream: StandInStream, own_ms: float, rest_ms: float = 5.0) -> float | None:
    """One step as the host queues it: own work, the first hand-off, the rest (all-reduce, optimizer)."""
    clock.next_step()
    stream.queue(own_ms)
    clock.handed()
    stream.queue(rest_ms)
    clock.handed()  # later buckets do not move the hand-off
    return clock.step_done()


@pytest.mark.parametrize(
    ("device", "kind"),
    [
        (torch.device("cpu"), "host"),
        (torch.device("cuda", 0), "cuda"),
        (torch.device("cuda"), "cuda"),
        (torch.device("meta"), None),
    ],
)
def test_the_host_clock_times_the_cpu_and_cuda_events_a_gpu(device: torch.device, kind: str | None) -> None:
    assert clock_kind(device) == kind


def test_a_step_is_read_once_the_device_has_done_it_without_waiting_for_it() -> None:
    stream = StandInStream()
    clock = OwnStepClock(stream.mark)
    assert step(clock, stream, own_ms=50) is None  # the host is ahead: nothing to read yet
    stream.done_ms = stream.queued_ms  # the device caught up (the host's next step)
    assert step(clock, stream, own_ms=70) == pytest.approx(0.05)
    stream.done_ms = stream.queued_ms
    assert clock.step_done() == pytest.approx(0.06)  # no new step: the one still pending is read


def test_steps_are_read_in_the_order_the_device_does_them() -> None:
    stream = StandInStream()
    clock = OwnStepClock(stream.mark)
    step(clock, stream, own_ms=10)
    step(clock, stream, own_ms=30)
    stream.done_ms = 12  # past the first step's hand-off, not the second's
    assert clock.step_done() == pytest.approx(0.01)
    stream.done_ms = stream.queued_ms
    assert clock.step_done() == pytest.approx(0.02)


def test_the_figure_is_the_average_of_the_last_window_of_steps_the_device_has_done() -> None:
    stream = StandInStream()
    clock = OwnStepClock(stream.mark)
    for _ in range(5):
        step(clock, stream, own_ms=100)
    for _ in range(WINDOW_STEPS):
        stream.done_ms = stream.queued_ms
        figure = step(clock, stream, own_ms=20)
    # The last step is still on the device: the window holds one step of 100 ms and 19 of 20 ms.
    assert figure == pytest.approx((0.1 + (WINDOW_STEPS - 1) * 0.02) / WINDOW_STEPS)


def test_a_host_far_ahead_of_its_device_keeps_no_more_than_a_window_of_steps() -> None:
    stream = StandInStream()
    clock = OwnStepClock(stream.mark)
    for own_ms in range(1, 3 * WINDOW_STEPS + 1):
        assert step(clock, stream, own_ms=own_ms) is None
    stream.done_ms = stream.queued_ms
    newest = range(2 * WINDOW_STEPS + 1, 3 * WINDOW_STEPS + 1)
    assert clock.step_done() == pytest.approx(sum(newest) / len(newest) / 1000)


def test_a_step_without_a_start_or_a_hand_off_is_not_counted() -> None:
    stream = StandInStream()
    clock = OwnStepClock(stream.mark)
    clock.handed()  # the first step: no start (start-up is nobody's own work)
    assert clock.step_done() is None
    clock.next_step()  # a step without an all-reduce (no gradient handed)
    stream.queue(10)
    stream.done_ms = stream.queued_ms
    assert clock.step_done() is None


def test_the_host_clock_reads_a_step_at_once() -> None:
    clock = OwnStepClock()
    clock.next_step()
    time.sleep(0.02)
    clock.handed()
    time.sleep(0.05)  # waiting on peers: not own work
    figure = clock.step_done()
    assert figure is not None and 0.02 <= figure < 0.05


@pytest.fixture
def context() -> Iterator[DistributedContext]:
    context = init_distributed(TorchRendezvous("127.0.0.1", 29500, world_size=1, rank=0, local_rank=0), 10)
    yield context
    dist.destroy_process_group()


class Sleepy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 2)
        self.seconds = 0.0

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return self.linear(batch)


def test_on_the_cpu_a_ddp_model_gets_the_host_clock_through_its_communication_hook(
    context: DistributedContext,
) -> None:
    module = Sleepy()
    model = DistributedDataParallel(module)
    clock = OwnStepClock.attach(model, context.device)
    assert clock is not None
    figures = []
    for seconds in (0.0, 0.03, 0.03, 0.03):  # the first step is not counted
        module.seconds = seconds
        model(torch.randn(4, 8)).sum().backward()
        figures.append(clock.step_done())
        clock.next_step()
    assert figures[0] is None
    assert all(f is not None and 0.03 <= f < 0.5 for f in figures[1:]), figures
    assert OwnStepClock.attach(model, context.device) is None  # DDP takes one hook: it has one
    assert OwnStepClock.attach(module, context.device) is None  # not DDP
    assert OwnStepClock.attach(DistributedDataParallel(Sleepy()), torch.device("meta")) is None
