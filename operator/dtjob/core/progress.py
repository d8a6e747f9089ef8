"""Training progress as the trainers report it, and what the operator makes of it. Pure.

Every pod of a job may POST a report (docs/progress.md): its step, and from rank 0 also the epoch, loss,
throughput, step time, the total step count and the last checkpoint's step. The adapter keeps the
latest report of each pod of the current attempt (a `Ledger`); a pass turns the ledger into
status.progress (`summary`) and judges whether the gang stopped stepping (`stall`).

A stall is judged from the first step on (the start-up and the first step's compile before it do not
count) and never while a pod says it is saving a checkpoint; leaving a save starts the clock afresh.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from pydantic import ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from dtjob.api import GROUP, Progress, parse_timestamp, timestamp
from dtjob.api.rules import WireModel

# The audience of the token each pod proves itself with: good for this and nothing else (not the API).
AUDIENCE: Final = f"{GROUP}/progress"
TOKEN_DIRECTORY: Final = f"/var/run/secrets/{GROUP}/progress"
TOKEN_SECONDS: Final = 3600
# A rank is slow when its own work a step is this many times the median of the rest of the gang's, and
# this much longer (a millisecond step's noise is not a straggler).
SLOW_FACTOR: Final = 1.5
SLOW_MARGIN_SECONDS: Final = 0.01


class Phase(StrEnum):
    STARTING = "starting"
    """Before the first step: loading, the rendezvous, the first step's compile."""
    TRAINING = "training"
    CHECKPOINTING = "checkpointing"
    """Saving a checkpoint: a step that does not advance now is not a hang."""


class Report(WireModel):
    """One pod's report, the body of the POST (camelCase; unknown fields are refused)."""

    model_config = ConfigDict(allow_inf_nan=False)

    step: NonNegativeInt
    """Optimizer steps completed."""
    phase: Phase = Phase.TRAINING
    total_steps: PositiveInt | None = None
    epoch: NonNegativeInt | None = None
    loss: float | None = None
    samples_per_second: NonNegativeFloat | None = None
    step_seconds: NonNegativeFloat | None = None
    last_checkpoint_step: NonNegativeInt | None = None
    message: str | None = Field(default=None, max_length=256)
    """Free text for the Event a stall causes (what the rank was doing)."""
    own_step_seconds: NonNegativeFloat | None = None
    """This rank's own work a step (its batch, forward and backward up to the first gradient all-reduce),
    without the time it then waits for its peers, over its last steps: what tells a slow rank."""


@dataclass(frozen=True)
class PodReport:
    """The latest report of one pod, with when its step last advanced and its phase last changed."""

    pod: str
    report: Report
    advanced_at: datetime
    phase_since: datetime
    first_step: tuple[datetime, int] | None = None
    """When this pod first reported a step past 0 in the attempt, and which: the pace since is the ETA's."""


@dataclass(frozen=True)
class Ledger:
    """The latest report of each pod of one attempt."""

    attempt: int
    pods: Mapping[str, PodReport]


def received(ledger: Ledger | None, attempt: int, pod: str, report: Report, now: datetime) -> Ledger | None:
    """The ledger with `report` of `pod` (of `attempt`, as its labels say) in it; None when the report
    belongs to an attempt older than the ledger's (a pod of it still running down)."""
    if ledger is not None and attempt < ledger.attempt:
        return None
    pods = dict(ledger.pods) if ledger is not None and ledger.attempt == attempt else {}
    previous = pods.get(pod)
    first_step = previous.first_step if previous is not None else None
    if first_step is None and report.step >= 1:
        first_step = (now, report.step)
    if previous is None:
        pods[pod] = PodReport(pod, report, now, now, first_step)
    else:
        advanced = report.step > previous.report.step
        changed_phase = report.phase != previous.report.phase
        pods[pod] = PodReport(
            pod,
            report,
            now if advanced else previous.advanced_at,
            now if changed_phase else previous.phase_since,
            first_step,
        )
    return Ledger(attempt, pods)


def wake_delay(news: bool, woken: float | None, now: float, interval: float) -> float:
    """Seconds until a report should wake its job's loop: 0 for news (a new pod, a new phase) or once
    `interval` has passed since the last wake at `woken`, else the rest of the interval. Reports in
    between are not dropped: they ride on that later wake, so the last report of a burst reaches the
    status too."""
    if news or woken is None:
        return 0.0
    return max(0.0, woken + interval - now)


def summary(ledger: Ledger, rank_zero: str) -> Progress:
    """status.progress from the ledger: rank 0's report, or the most advanced pod's until rank 0 reports."""
    lead = ledger.pods.get(rank_zero) or max(ledger.pods.values(), key=lambda p: (p.report.step, p.pod))
    report = lead.report
    percent = eta = None
    if report.total_steps is not None:
        percent = round(100.0 * min(report.step, report.total_steps) / report.total_steps, 1)
        if (pace := _pace(lead)) is not None:
            left = max(report.total_steps - report.step, 0) * pace
            eta = timestamp(lead.advanced_at + timedelta(seconds=min(left, 10 * 365 * 86400)))
    return Progress(
        attempt=ledger.attempt,
        step=report.step,
        total_steps=report.total_steps,
        percent=percent,
        epoch=report.epoch,
        loss=_rounded(report.loss),
        samples_per_second=_rounded(report.samples_per_second),
        step_seconds=_rounded(report.step_seconds),
        last_checkpoint_step=report.last_checkpoint_step,
        eta=eta,
        updated_at=timestamp(lead.advanced_at),
    )


def _pace(lead: PodReport) -> float | None:
    """Seconds a step, for the ETA: the attempt's average since the pod's first step, as reports came
    (saves, evaluations and data-loader stalls included, as they will be in the steps left); before a
    second step is seen, the trainer's own recent step time. The trainer's figure alone covers its last
    few steps only: one taken just after a save makes an ETA far too late."""
    if lead.first_step is not None:
        since, step = lead.first_step
        elapsed = (lead.advanced_at - since).total_seconds()
        if lead.report.step > step and elapsed > 0:
            return elapsed / (lead.report.step - step)
    return lead.report.step_seconds if lead.report.step >= 1 else None


def _rounded(value: float | None) -> float | None:
    """Four significant digits: a status that changed only in the noise is not worth a write."""
    if value is None or value == 0:
        return value
    return round(value, 3 - math.floor(math.log10(abs(value))))


@dataclass(frozen=True)
class Stall:
    """A gang that stopped stepping: since when, at which step, and the pod that fell behind, if one did."""

    since: datetime
    step: int
    behind: PodReport | None = None
    """The pod that stopped at the lowest step, when the others got further: the one to look at. In a
    data-parallel gang every rank stops at the same step (the others wait in the next collective), and
    then no pod is singled out."""
    reporting: int = 0
    """Pods that reported (0: judged from the recorded status alone)."""


@dataclass(frozen=True)
class Clock:
    """Where a gang stands against progressDeadlineSeconds: stalled, or seconds left (None: not judged)."""

    stall: Stall | None = None
    left: float | None = None


def judge(
    ledger: Ledger | None, recorded: Progress | None, attempt: int, deadline_seconds: int, now: datetime
) -> Clock:
    """Against the deadline, from the ledger of `attempt`; without one (a new leader, whose trainers'
    reports went to the one before), from status.progress as recorded for that attempt."""
    deadline = timedelta(seconds=deadline_seconds)
    if ledger is not None and ledger.attempt == attempt and ledger.pods:
        reports = list(ledger.pods.values())
        if not any(p.report.step >= 1 for p in reports):
            return Clock()  # still starting: the first step's compile is not a hang
        if any(p.report.phase == Phase.CHECKPOINTING for p in reports):
            return Clock()  # a save under way is not a hang, however long
        lead = max(reports, key=lambda p: p.advanced_at)
        since = max(lead.advanced_at, max(p.phase_since for p in reports))
        if now - since < deadline:
            return Clock(left=(since + deadline - now).total_seconds())
        behind = [p for p in reports if p.report.step < lead.report.step]
        first = min(behind, key=lambda p: (p.report.step, p.advanced_at, p.pod)) if behind else None
        return Clock(Stall(since, lead.report.step, first, len(reports)))
    if recorded is None or recorded.attempt != attempt or recorded.step < 1:
        return Clock()
    since = parse_timestamp(recorded.updated_at)
    if now - since < deadline:
        return Clock(left=(since + deadline - now).total_seconds())
    return Clock(Stall(since, recorded.step))


def stall_message(stall: Stall, deadline_seconds: int, now: datetime) -> str:
    if (behind := stall.behind) is not None:
        note = f" ({behind.report.message})" if behind.report.message else ""
        who = f"; pod {behind.pod} fell behind first, at step {behind.report.step}{note}"
    elif stall.reporting:
        who = f"; all {stall.reporting} reporting pods stopped at that step"
    else:
        who = ""
    waited = (now - stall.since).total_seconds()
    return (
        f"no step advance for {waited:.0f}s (progressDeadlineSeconds {deadline_seconds}) while every "
        f"member ran: last step {stall.step} at {timestamp(stall.since)}{who}"
    )


@dataclass(frozen=True)
class SlowRank:
    pod: str
    seconds: float
    """Its own work a step."""
    others: float
    """The median of the rest of the gang's."""


def slow_ranks(ledger: Ledger | None, attempt: int) -> tuple[SlowRank, ...] | None:
    """The pods of `attempt` whose own step time stays well above the rest's; None when that cannot be
    judged (fewer than two training pods report it). Each figure is the trainer's average over its last
    steps, so one slow step (a save, a garbage collection) does not make a slow rank."""
    if ledger is None or ledger.attempt != attempt:
        return None
    own = {
        p.pod: p.report.own_step_seconds
        for p in ledger.pods.values()
        if p.report.own_step_seconds is not None and p.report.phase == Phase.TRAINING
    }
    if len(own) < 2:
        return None
    slow = []
    for pod, seconds in sorted(own.items()):
        others = statistics.median(v for name, v in own.items() if name != pod)
        if seconds > SLOW_FACTOR * others and seconds - others > SLOW_MARGIN_SECONDS:
            slow.append(SlowRank(pod, seconds, others))
    return tuple(slow)


def reached_step(ledger: Ledger | None, recorded: Progress | None, attempt: int) -> int | None:
    """The furthest step `attempt` is known to have reached: its pods' reports, or its recorded progress."""
    steps = (
        [p.report.step for p in ledger.pods.values()]
        if ledger is not None and ledger.attempt == attempt
        else []
    )
    if recorded is not None and recorded.attempt == attempt:
        steps.append(recorded.step)
    return max(steps, default=None)


def carried(old: Progress | None, ledger: Ledger | None, rank_zero: str, attempt: int) -> Progress | None:
    """The status.progress a pass writes: the ledger's, when it has reports of the current attempt;
    else what was recorded (a restarted gang shows where the last attempt got until it reports)."""
    if ledger is not None and ledger.attempt == attempt and ledger.pods:
        return summary(ledger, rank_zero)
    return old
