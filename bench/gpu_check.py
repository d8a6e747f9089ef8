"""What the trainer runtime does on a GPU, checked in one run of a few minutes on one card (torch with CUDA
and this repository, nothing else):

    .venv/bin/python -m bench.gpu_check [--delay-ms 60] [--steps 30] [--state-mb 500] [--report-steps 500]

1. A rank's own step time from CUDA events (dtjob_trainer.pytorch.own_time). `torch.cuda._sleep` spins
   for a number of GPU cycles: it is calibrated to milliseconds first. A single-process DDP (NCCL, world
   size 1) of a small MLP then trains --steps steps as they are and --steps steps with --delay-ms of that
   sleep at the start of its forward pass (on the device, before the first gradient bucket is handed to
   the all-reduce). Each step ends with `loss.item()`, as a loop that logs its loss (or the session's stop
   flag) does. Printed: the own step time the runtime reports (OwnStepClock.step_done, the session's
   ownStepSeconds), a host clock over the same span (this bench's only: time.monotonic at the step's
   start and at the hand-off, no synchronisation) and the sleep as the device timed it. PASS when
   |reported slowed - reported baseline - injected| <= 10 % of injected and the host clock sees less than
   half of the injected delay (it is what the CUDA events replace).
2. The held checkpoint (restartStrategy InPlace) restored into the model and optimizer on the GPU from
   this process's memory, and from the volume, compared bitwise with what was saved (the first two rows
   of bench.checkpoint_restore, with NCCL and the state on the card).
3. What progress reporting costs a training step on the GPU: the same DDP steps through the runtime's
   session without and with a progress poster (posting to a local stand-in intake; with it comes the
   CUDA-event clock), the two alternating in one run.

Exits non-zero with a one-line reason where no CUDA device is visible, and after a FAIL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from dtjob_trainer.environment import TorchRendezvous, TrainerEnvironment
from dtjob_trainer.pytorch.distributed import DistributedContext, distributed
from dtjob_trainer.pytorch.own_time import WINDOW_STEPS, Mark, OwnStepClock, clock_kind
from dtjob_trainer.pytorch.session import open_session
from dtjob_trainer.pytorch.state import TrainingState
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from bench.checkpoint_restore import synchronized, volume_and_own_memory
from bench.progress_report_cost import taking_intake

WIDTH = 2048
BATCH = 256
WARM_UP_STEPS = 10
CALIBRATION_CYCLES = 20_000_000
TOLERANCE = 0.10  # of the injected delay
MIN_DELAY_MS = 50.0


def timing_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)


def sleep_ms(cycles: int) -> float:
    """How long a `torch.cuda._sleep(cycles)` lasts on the device, in milliseconds."""
    start, end = timing_event(), timing_event()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def cycles_per_ms() -> float:
    sleep_ms(CALIBRATION_CYCLES)  # warm-up: the kernel loads, the clocks come up
    return statistics.median(CALIBRATION_CYCLES / sleep_ms(CALIBRATION_CYCLES) for _ in range(5))


class Slowed(nn.Module):
    """An MLP with a sleep on the device at the start of its forward pass, timed by events around it."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10)
        )
        self.cycles = 0
        self.injected: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        if self.cycles:
            before, after = timing_event(), timing_event()
            before.record()
            torch.cuda._sleep(self.cycles)
            after.record()
            self.injected.append((before, after))
        return self.net(batch)


class HostClocked(OwnStepClock):
    """The runtime's clock, and beside it the host's over the same span (what the CUDA events replace)."""

    def __init__(self, mark: Callable[[], Mark]) -> None:
        super().__init__(mark)
        self._host_started: float | None = None
        self._host_handed: float | None = None
        self.host: deque[float] = deque(maxlen=WINDOW_STEPS)

    def handed(self) -> None:
        if self._host_handed is None:
            self._host_handed = time.monotonic()
        super().handed()

    def step_done(self) -> float | None:
        if self._host_started is not None and self._host_handed is not None:
            self.host.append(self._host_handed - self._host_started)
        self._host_started = None
        return super().step_done()

    def next_step(self) -> None:
        super().next_step()
        self._host_started, self._host_handed = time.monotonic(), None


def batch_on(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(BATCH, WIDTH, device=device), torch.randint(0, 10, (BATCH,), device=device)


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor, target: torch.Tensor
) -> float:
    loss = F.cross_entropy(model(batch), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()  # the host waits for the device here, after the hand-off


def own_time(context: DistributedContext, delay_ms: float, steps: int) -> bool:
    """Part 1; whether it passed."""
    device = context.device
    rate = cycles_per_ms()
    cycles = round(delay_ms * rate)
    print(
        f"calibration: {rate:,.0f} cycles/ms; {cycles:,} cycles last {sleep_ms(cycles):.2f} ms (asked {delay_ms:g})"
    )
    module = Slowed().to(device)
    model = DistributedDataParallel(module)
    clock = HostClocked.attach(model, device)
    assert clock is not None and clock_kind(device) == "cuda", "no CUDA-event clock attached"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch, target = batch_on(device)

    def run(count: int) -> tuple[float, float]:
        reported = None
        for _ in range(count):
            train_step(model, optimizer, batch, target)
            reported = clock.step_done()
            clock.next_step()
        assert reported is not None, "the runtime reported no own step time"
        return reported, statistics.fmean(clock.host)

    run(WARM_UP_STEPS)
    base, host_base = run(steps)
    module.cycles = cycles
    slow, host_slow = run(steps)
    injected = statistics.fmean(b.elapsed_time(a) for b, a in module.injected[-WINDOW_STEPS:]) / 1000
    error = abs(slow - base - injected)
    events_ok = error <= TOLERANCE * injected
    host_ok = host_slow - host_base < injected / 2
    print(f"own step time over the last {WINDOW_STEPS} steps of {steps}, {context.backend} on {device}:")
    print(f"{'':<24}{'baseline':>10}{'slowed':>10}{'added':>10}")
    print(
        f"{'reported (CUDA events)':<24}{base * 1e3:>8.2f}ms{slow * 1e3:>8.2f}ms{(slow - base) * 1e3:>8.2f}ms"
    )
    print(
        f"{'host clock (bench)':<24}{host_base * 1e3:>8.2f}ms{host_slow * 1e3:>8.2f}ms"
        f"{(host_slow - host_base) * 1e3:>8.2f}ms"
    )
    print(f"{'injected (device)':<24}{'':>10}{'':>10}{injected * 1e3:>8.2f}ms")
    print(
        f"{'PASS' if events_ok else 'FAIL'}: |reported - baseline - injected| = {error * 1e3:.2f} ms "
        f"({error / injected:.1%} of injected; at most {TOLERANCE:.0%})"
    )
    print(
        f"{'PASS' if host_ok else 'FAIL'}: the host clock sees {(host_slow - host_base) / injected:.1%} "
        "of the injected delay (less than half)"
    )
    if injected * 1e3 < MIN_DELAY_MS:
        print(
            f"note: the sleep lasted less than the {MIN_DELAY_MS:g} ms the check asks for (clocks changed?)"
        )
    return events_ok and host_ok and injected * 1e3 >= MIN_DELAY_MS


def seconds_a_step(context: DistributedContext, steps: int, posting: bool, url: str, workdir: Path) -> float:
    """One round of part 3: DDP steps through the runtime's session, with or without a progress poster."""
    token = workdir / "token"
    token.write_text("bench")
    progress = {"DTJ_PROGRESS_URL": url, "DTJ_PROGRESS_TOKEN_FILE": str(token)}
    for name in progress:
        os.environ.pop(name, None)
    if posting:
        os.environ.update(progress)
    env = TrainerEnvironment.from_environ(
        {"DTJ_CHECKPOINT_DIR": str(workdir / f"checkpoints-{time.monotonic_ns()}"), "DTJ_METRICS_PORT": "0"}
    )
    # A new DDP each round: DDP takes one communication hook, and the poster's round registers one.
    model = DistributedDataParallel(Slowed().to(context.device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    state = TrainingState(model, optimizer)
    batch, target = batch_on(context.device)
    try:
        with open_session(env, context, state, checkpoint_every_steps=10**9, total_steps=steps) as session:
            for _ in range(WARM_UP_STEPS):
                session.end_of_step(train_step(model, optimizer, batch, target), samples=BATCH)
            synchronized(context)
            started = time.perf_counter()
            for _ in range(steps):
                session.end_of_step(train_step(model, optimizer, batch, target), samples=BATCH)
            synchronized(context)
            return (time.perf_counter() - started) / steps
    finally:
        for name in progress:
            os.environ.pop(name, None)


def report_cost(context: DistributedContext, steps: int, rounds: int, workdir: Path) -> None:
    """Part 3."""
    figures: dict[bool, list[float]] = {False: [], True: []}
    with taking_intake() as (url, taken):
        for _ in range(rounds):
            for posting in (False, True):
                figures[posting].append(seconds_a_step(context, steps, posting, url, workdir))
    without, with_poster = (statistics.median(figures[p]) * 1e6 for p in (False, True))
    own = [r["ownStepSeconds"] for r in taken if "ownStepSeconds" in r]
    print(f"a training step on the GPU, {steps} steps a round, {rounds} rounds, medians:")
    print(
        f"without the progress report: {without:.1f} us ({', '.join(f'{v * 1e6:.1f}' for v in figures[False])})"
    )
    print(
        f"with it:                     {with_poster:.1f} us ({', '.join(f'{v * 1e6:.1f}' for v in figures[True])})"
    )
    print(
        f"added: {with_poster - without:.1f} us a step (x{with_poster / without:.3f}); reports taken: {len(taken)}"
    )
    print(
        f"ownStepSeconds in the last report: {own[-1] * 1e3:.3f} ms"
        if own
        else "no report carried ownStepSeconds"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--delay-ms", type=float, default=60.0, help="the slowed steps' sleep on the device")
    parser.add_argument("--steps", type=int, default=30, help="steps without and with the sleep")
    parser.add_argument("--state-mb", type=float, default=500.0, help="the held checkpoint's size")
    parser.add_argument("--repeats", type=int, default=3, help="restores of the held checkpoint")
    parser.add_argument("--report-steps", type=int, default=500, help="steps a round, progress report cost")
    parser.add_argument("--report-rounds", type=int, default=3)
    args = parser.parse_args()
    if args.delay_ms < MIN_DELAY_MS:
        parser.error(f"--delay-ms: at least {MIN_DELAY_MS:g}")
    if args.steps < WINDOW_STEPS + 5:
        parser.error(f"--steps: at least {WINDOW_STEPS + 5} (the report's window is {WINDOW_STEPS} steps)")
    if not torch.cuda.is_available():
        raise SystemExit("bench.gpu_check: no CUDA device visible (torch.cuda.is_available() is False)")
    torch.manual_seed(0)
    card = torch.cuda.get_device_name()
    print(f"card: {card}; torch {torch.__version__}, CUDA {torch.version.cuda}")
    alone = TorchRendezvous("127.0.0.1", 0, world_size=1, rank=0, local_rank=0)
    with distributed(alone, rendezvous_timeout_s=30) as context, tempfile.TemporaryDirectory() as scratch:
        if context.device.type != "cuda":
            raise SystemExit(f"bench.gpu_check: the process group came up on {context.device}, not a GPU")
        print("\n1. own step time from CUDA events")
        passed = own_time(context, args.delay_ms, args.steps)
        print("\n2. the held checkpoint restored onto the GPU, bitwise")
        volume_and_own_memory(context, Path(scratch) / "held", args.state_mb, args.repeats, drop_caches=False)
        print("\n3. the progress report's cost a step on the GPU")
        report_cost(context, args.report_steps, args.report_rounds, Path(scratch))
    print(f"\n{'PASS' if passed else 'FAIL'} on {card}")
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
