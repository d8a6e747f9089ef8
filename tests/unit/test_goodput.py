"""status.goodput in whole passes (reconcile): productive time from the progress reports, and a gang
restart's cost followed phase by phase as the passes see each phase end."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob.api import Goodput
from dtjob.core.progress import Ledger, Report, received
from tests.support.builders import exited, pods_of, running, service_of
from tests.support.plan import after, plan_for
from tests.support.progress import JOB, MASTER, WORKER, at


def report(ledger: Ledger | None, attempt: int, seconds: float, **body: Any) -> Ledger | None:
    for pod in (MASTER, WORKER):
        ledger = received(ledger, attempt, pod, Report.model_validate(body), at(seconds))
    return ledger


def goodput(job: dict[str, Any]) -> Goodput:
    return Goodput.model_validate(job["status"]["goodput"])


def trained_to_step_50() -> tuple[dict[str, Any], Ledger | None]:
    """Attempt 1 created at 0 s, running at 5 s; steps 10 reported at 10 s, 50 (checkpoint 40) at 30 s."""
    job = after(JOB, plan_for(JOB, [], at(0)))  # the pods of attempt 1 created
    assert goodput(job).since == "2030-01-01T12:00:00Z" and goodput(job).productive_seconds == 0
    first = [service_of(JOB), *(running(p) for p in pods_of(JOB).values())]
    job = after(job, plan_for(job, first, at(5)))
    ledger = report(None, 1, 10, step=10, stepSeconds=0.5)
    job = after(job, plan_for(job, first, at(10), ledger=ledger))
    ledger = report(ledger, 1, 30, step=50, stepSeconds=0.5, lastCheckpointStep=40)
    return after(job, plan_for(job, first, at(30), ledger=ledger)), ledger


def test_goodput_counts_stepping_time_and_a_restarts_phases_and_lost_work() -> None:
    job, ledger = trained_to_step_50()
    assert (goodput(job).productive_seconds, goodput(job).wall_seconds, goodput(job).percent) == (
        20,
        30,
        66.7,
    )

    # The worker is preempted (it saved and exited 200) 2 s before the operator sees it.
    pods = pods_of(JOB)
    broken = [
        service_of(JOB),
        running(pods[MASTER]),
        exited(pods[WORKER], 200, finished="2030-01-01T12:00:38Z"),
    ]
    job = after(job, plan_for(job, broken, at(40), ledger=ledger))
    assert job["status"]["attempt"] == 2
    cost = goodput(job).last_restart
    assert cost is not None and (cost.attempt, cost.reason) == (2, "Preempted")
    assert (cost.detection_seconds, cost.lost_work_seconds) == (2, 5)  # 10 steps past step 40, 0.5 s each
    assert goodput(job).productive_seconds == 15  # the 5 s redone are not productive

    created = plan_for(job, [service_of(JOB)], at(45), ledger=ledger)  # the old pods are gone
    assert [p["metadata"]["name"] for p in created.create] == [MASTER, WORKER]
    job = after(job, created)
    assert goodput(job).last_restart.teardown_seconds == 5  # type: ignore[union-attr]
    second = [service_of(JOB), *(running(p) for p in pods_of(JOB, attempt=2).values())]
    job = after(job, plan_for(job, second, at(50), ledger=ledger))
    assert goodput(job).last_restart.start_seconds == 5  # type: ignore[union-attr]
    assert goodput(job).last_restart.total_seconds is None  # type: ignore[union-attr]

    ledger = report(ledger, 2, 58, step=41, stepSeconds=0.5, lastCheckpointStep=40)  # resumed at step 40
    job = after(job, plan_for(job, second, at(58), ledger=ledger))
    cost = goodput(job).last_restart
    assert cost is not None and (cost.restore_seconds, cost.total_seconds) == (8, 25)  # 2 + 5 + 5 + 8 + 5
    assert goodput(job).restart_seconds == 25
    ledger = report(ledger, 2, 78, step=81, stepSeconds=0.5, lastCheckpointStep=80)
    job = after(job, plan_for(job, second, at(78), ledger=ledger))
    assert (goodput(job).productive_seconds, goodput(job).wall_seconds) == (35, 78)
    assert goodput(job).percent == pytest.approx(44.9)
    assert goodput(job).restart_seconds == 25  # counted once


def test_a_job_whose_trainers_do_not_report_has_goodput_without_a_restore() -> None:
    job = after(JOB, plan_for(JOB, [], at(0)))
    first = [service_of(JOB), *(running(p) for p in pods_of(JOB).values())]
    job = after(job, plan_for(job, first, at(5)))
    assert goodput(job).percent is None and goodput(job).productive_seconds == 0
    pods = pods_of(JOB)
    job = after(
        job, plan_for(job, [service_of(JOB), running(pods[MASTER]), exited(pods[WORKER], 200)], at(9))
    )
    cost = goodput(job).last_restart
    assert cost is not None and cost.detection_seconds == 0 and cost.lost_work_seconds is None


def test_a_second_restart_clears_the_first_ones_finished_phases_on_the_server() -> None:
    """The status is a merge patch from the stored one: the open cost of restart 2 must not keep restart 1's
    total, start or restore (the patch nulls them)."""
    job = after(JOB, plan_for(JOB, [], at(0)))
    first = [service_of(JOB), *(running(p) for p in pods_of(JOB).values())]
    job = after(job, plan_for(job, first, at(5)))
    ledger = report(None, 1, 10, step=10, stepSeconds=0.5, lastCheckpointStep=10)
    job = after(job, plan_for(job, first, at(10), ledger=ledger))
    pods = pods_of(JOB)
    job = after(
        job,
        plan_for(
            job, [service_of(JOB), running(pods[MASTER]), exited(pods[WORKER], 200)], at(12), ledger=ledger
        ),
    )
    job = after(job, plan_for(job, [service_of(JOB)], at(14), ledger=ledger))
    second = [service_of(JOB), *(running(p) for p in pods_of(JOB, attempt=2).values())]
    job = after(job, plan_for(job, second, at(16), ledger=ledger))
    ledger = report(ledger, 2, 20, step=11, stepSeconds=0.5, lastCheckpointStep=10)
    job = after(job, plan_for(job, second, at(20), ledger=ledger))
    assert job["status"]["goodput"]["lastRestart"]["totalSeconds"] is not None
    pods = pods_of(JOB, attempt=2)
    job = after(
        job,
        plan_for(
            job, [service_of(JOB), running(pods[MASTER]), exited(pods[WORKER], 200)], at(25), ledger=ledger
        ),
    )
    stored = job["status"]["goodput"]["lastRestart"]
    assert stored["attempt"] == 3
    assert not {
        "totalSeconds",
        "restoreSeconds",
        "startSeconds",
        "teardownSeconds",
        "createdAt",
        "resumedFromStep",
    } & set(stored), stored


@pytest.mark.parametrize(
    ("resumed_from", "lost_work", "productive"),
    [
        pytest.param(50, 0.0, 20, id="the ranks saved the step they stopped at"),
        pytest.param(40, 5.0, 15, id="the last periodic checkpoint"),
    ],
)
def test_the_work_lost_is_what_the_new_attempt_does_again(
    resumed_from: int, lost_work: float, productive: float
) -> None:
    job, ledger = trained_to_step_50()
    pods = pods_of(JOB)
    broken = [service_of(JOB), running(pods[MASTER]), exited(pods[WORKER], 200)]
    job = after(job, plan_for(job, broken, at(32), ledger=ledger))
    cost = goodput(job).last_restart
    assert cost is not None and (cost.stopped_at_step, cost.lost_work_seconds) == (50, 5)  # an estimate
    job = after(job, plan_for(job, [service_of(JOB)], at(33), ledger=ledger))
    second = [service_of(JOB), *(running(p) for p in pods_of(JOB, attempt=2).values())]
    job = after(job, plan_for(job, second, at(34), ledger=ledger))

    ledger = report(ledger, 2, 35, step=0, phase="starting")  # the trainers start: no step yet
    job = after(job, plan_for(job, second, at(35), ledger=ledger))
    assert goodput(job).last_restart.total_seconds is None  # type: ignore[union-attr]
    ledger = report(ledger, 2, 36, step=resumed_from + 1, stepSeconds=0.5, lastCheckpointStep=resumed_from)
    job = after(job, plan_for(job, second, at(36), ledger=ledger))
    cost = goodput(job).last_restart
    assert cost is not None and (cost.resumed_from_step, cost.lost_work_seconds) == (resumed_from, lost_work)
    assert cost.total_seconds == pytest.approx(0 + 1 + 1 + 2 + lost_work)
    assert goodput(job).productive_seconds == productive  # 20 s of stepping, less what is done again
