"""Goodput: how much of a job's wall time trained, and what each gang restart cost (status.goodput).

Pure: a pass's old and new status and what it observed give the next status.goodput. Productive time is
the time in which the reported step advanced (progress reports, docs/progress.md), less the work each
restart made the gang do again (the steps past the last checkpoint). A restart's cost is followed phase by
phase as passes see each one end: detection (the first member's end to the restart), teardown (to every
pod of the new attempt created), start (to every member running), restore (to the new attempt's first
reported step). The work lost is estimated when the restart begins, and is nothing once the new attempt
reports that it resumed from the step the ended one stopped at (its ranks saved on SIGTERM). Everything is
as of the latest progress report (or the job's end) rather than of the pass, so goodput changes only when
the status changes anyway: no write of its own.
"""

from __future__ import annotations

from datetime import datetime

from dtjob.api import (
    ConditionType,
    Goodput,
    JobStatus,
    Progress,
    RestartCost,
    parse_timestamp,
    precise_timestamp,
)
from dtjob.core.observed import Observed


def next_goodput(old: JobStatus, new: JobStatus, observed: Observed, now: datetime) -> Goodput | None:
    """status.goodput after a pass that turned `old` into `new`; None until the job's pods exist."""
    previous = old.goodput
    since = previous.since if previous is not None else new.start_time
    if since is None:
        return None
    cost = previous.last_restart if previous is not None else None
    if previous is not None and (cost is None or cost.total_seconds is not None) and _same_facts(old, new):
        return previous  # the steady pass: nothing goodput is made of changed
    productive = previous.productive_seconds if previous is not None else 0.0
    spent = previous.restart_seconds if previous is not None else 0.0
    if new.last_restart is not None and new.last_restart != old.last_restart and new.attempt > old.attempt:
        cost = _restart_began(old, new, observed, now)
        productive = max(0.0, productive - (cost.lost_work_seconds or 0.0))
    if cost is not None and cost.attempt == new.attempt and cost.total_seconds is None:
        estimated = cost.lost_work_seconds or 0.0
        cost = _restart_went_on(cost, new, now)
        spent += cost.total_seconds or 0.0
        productive += estimated - (cost.lost_work_seconds or 0.0)  # the work not lost after all
    productive += _stepping_seconds(old.progress, new.progress)
    as_of = new.completion_time or (new.progress.updated_at if new.progress is not None else None)
    as_of = as_of or (previous.as_of if previous is not None else since)
    wall = max(0.0, (parse_timestamp(as_of) - parse_timestamp(since)).total_seconds())
    return Goodput(
        since=since,
        as_of=as_of,
        productive_seconds=round(productive, 3),
        wall_seconds=round(wall, 3),
        percent=round(100 * min(productive, wall) / wall, 1) if wall > 0 else None,
        restart_seconds=round(spent, 3),
        last_restart=cost,
    )


def _same_facts(old: JobStatus, new: JobStatus) -> bool:
    return (
        new.progress == old.progress
        and new.last_restart == old.last_restart
        and new.completion_time == old.completion_time
    )


def _restart_began(old: JobStatus, new: JobStatus, observed: Observed, now: datetime) -> RestartCost:
    """The pass that restarted the gang: detection ended, and the work past the checkpoint is lost."""
    assert new.last_restart is not None
    ended = [p.ended_at for p in observed.of_attempt(old.attempt) if p.ended_at is not None]
    broke = min([*ended, now])
    progress = old.progress if old.progress is not None and old.progress.attempt == old.attempt else None
    return RestartCost(
        attempt=new.attempt,
        reason=new.last_restart.reason,
        detection_seconds=_seconds(broke, now),
        lost_work_seconds=_lost_work(progress),
        stopped_at_step=progress.step if progress is not None else None,
        restarted_at=precise_timestamp(now),
    )


def _restart_went_on(cost: RestartCost, new: JobStatus, now: datetime) -> RestartCost:
    """The phases of an open restart that this pass saw end: created, running, first step reported."""
    update: dict[str, object] = {}
    created, running = cost.created_at, cost.running_at
    if created is None and new.created_attempt == cost.attempt:
        created = precise_timestamp(now)
        update |= {"created_at": created, "teardown_seconds": _between(cost.restarted_at, now)}
    if created is not None and running is None and new.attempt == cost.attempt and _running(new):
        running = precise_timestamp(now)
        update |= {"running_at": running, "start_seconds": _between(created, now)}
    progress = new.progress
    # A trainer's first report comes as it starts, at step 0, before it has resumed: not a step yet.
    if (
        running is not None
        and progress is not None
        and progress.attempt == cost.attempt
        and progress.step >= 1
    ):
        first_step = max(parse_timestamp(progress.updated_at), parse_timestamp(running))
        restore = _between(running, first_step)
        resumed = progress.last_checkpoint_step
        lost = cost.lost_work_seconds
        stopped = cost.stopped_at_step
        if lost is not None and resumed is not None and stopped is not None and resumed >= stopped:
            lost = 0.0  # the new attempt resumed where the ended one stopped: nothing is done again
        phases = (
            cost.detection_seconds,
            update.get("teardown_seconds", cost.teardown_seconds),
            update.get("start_seconds", cost.start_seconds),
            restore,
            lost,
        )
        total = sum(float(p) for p in phases if isinstance(p, float))
        update |= {
            "restore_seconds": restore,
            "lost_work_seconds": lost,
            "resumed_from_step": resumed,
            "total_seconds": round(total, 3),
        }
    return cost.model_copy(update=update) if update else cost


def _running(status: JobStatus) -> bool:
    running = status.condition(ConditionType.RUNNING)
    return running is not None and running.status == "True"


def _stepping_seconds(old: Progress | None, new: Progress | None) -> float:
    """The time between two reports of one attempt in which its step advanced; not from a report of
    step 0, which a trainer sends as it starts (what follows is its start-up: imports, rendezvous, resume)."""
    if old is None or new is None or old.attempt != new.attempt or new.step <= old.step or old.step < 1:
        return 0.0
    return max(0.0, (parse_timestamp(new.updated_at) - parse_timestamp(old.updated_at)).total_seconds())


def _lost_work(progress: Progress | None) -> float | None:
    """The ended attempt's training past its last checkpoint, which the next attempt does again, as far
    as its progress says when the restart begins (its ranks may still save where they stop)."""
    if progress is None or progress.step_seconds is None:
        return None
    past = progress.step - (progress.last_checkpoint_step or 0)
    return round(max(0, past) * progress.step_seconds, 3)


def _between(start: str, end: datetime) -> float:
    return _seconds(parse_timestamp(start), end)


def _seconds(start: datetime, end: datetime) -> float:
    return round(max(0.0, (end - start).total_seconds()), 3)
