"""decide(): one table, one row per situation a gang can be in."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dtjob.api import DistributedTrainingJobSpec, JobStatus
from dtjob.frameworks import Gang
from dtjob.names import JobRef
from dtjob.observed import observe
from dtjob.policy import Action, Decision, Reason, backoff_seconds, decide
from tests.unit.builders import NOW, exited, manifest, pending, pods_of, preempted, running

ONE_AND_TWO = manifest(("Master", 1), ("Worker", 2))
P = pods_of(ONE_AND_TWO)
M, W0, W1 = P["mnist-master-0"], P["mnist-worker-0"], P["mnist-worker-1"]
M4, W04, W14 = pods_of(ONE_AND_TWO, attempt=4).values()
WORKERS = manifest(("Worker", 2))
Q = pods_of(WORKERS)


def run_policy(**policy: Any) -> dict[str, Any]:
    return {**ONE_AND_TWO, "spec": {**ONE_AND_TWO["spec"], "runPolicy": policy}}


def finished(completed: str, **extra: Any) -> dict[str, Any]:
    condition = {
        "type": "Succeeded",
        "status": "True",
        "reason": "RankZeroSucceeded",
        "lastTransitionTime": completed,
    }
    return {"conditions": [condition], "completionTime": completed, **extra}


def at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def decision(
    job: dict[str, Any], children: list[dict[str, Any]], status: dict[str, Any] | None = None
) -> Decision:
    spec = DistributedTrainingJobSpec.model_validate(job["spec"])
    current = JobStatus.model_validate(status or {})
    return decide(spec, current, Gang.of(JobRef.of(job), spec, current.attempt), observe(children), NOW)


ALL_RUNNING = [running(M), running(W0), running(W1)]

CASES = [
    ("a fresh job creates its pods", ONE_AND_TWO, [], None, Action.CREATE_MISSING, Reason.CREATING),
    ("a job whose pods all run waits", ONE_AND_TWO, ALL_RUNNING, None, Action.WAIT, Reason.IN_PROGRESS),
    ("a job missing one pod creates it", ONE_AND_TWO, [running(M), running(W0)], None, Action.CREATE_MISSING, Reason.CREATING),
    ("the Master succeeding completes the job", ONE_AND_TWO, [exited(M, 0), running(W0), running(W1)], None,
     Action.COMPLETE, Reason.RANK_ZERO_SUCCEEDED),
    ("rank zero succeeding wins over a peer that failed meanwhile", ONE_AND_TWO, [exited(M, 0), exited(W0, 1), running(W1)], None,
     Action.COMPLETE, Reason.RANK_ZERO_SUCCEEDED),
    ("a Worker succeeding while the Master runs is not success", ONE_AND_TWO, [running(M), exited(W0, 0), running(W1)], None,
     Action.WAIT, Reason.IN_PROGRESS),
    ("Worker 0 succeeding completes a Worker-only job", WORKERS, [exited(Q["mnist-worker-0"], 0), running(Q["mnist-worker-1"])], None,
     Action.COMPLETE, Reason.RANK_ZERO_SUCCEEDED),
    ("under AllWorkers one Worker succeeding is not enough",
     {**WORKERS, "spec": {**WORKERS["spec"], "runPolicy": {"successPolicy": "AllWorkers"}}},
     [exited(Q["mnist-worker-0"], 0), running(Q["mnist-worker-1"])], None, Action.WAIT, Reason.IN_PROGRESS),
    ("under AllWorkers every Worker succeeding completes the job",
     {**WORKERS, "spec": {**WORKERS["spec"], "runPolicy": {"successPolicy": "AllWorkers"}}},
     [exited(p, 0) for p in Q.values()], None, Action.COMPLETE, Reason.ALL_WORKERS_SUCCEEDED),
    ("a failed Worker restarts the gang under OnFailure", ONE_AND_TWO, [running(M), exited(W0, 1), running(W1)], None,
     Action.RESTART_GANG, Reason.POD_FAILED),
    ("a failure after backoffLimit restarts fails the job", ONE_AND_TWO, [running(M4), exited(W04, 1), running(W14)],
     {"attempt": 4, "restarts": {"failures": 3, "total": 3}}, Action.FAIL, Reason.BACKOFF_LIMIT_EXCEEDED),
    ("any failure fails the job under Never", run_policy(restartPolicy="Never"), [running(M), exited(W0, 137), running(W1)], None,
     Action.FAIL, Reason.POD_FAILED),
    ("exit code 1 is permanent under ExitCode", run_policy(restartPolicy="ExitCode"), [running(M), exited(W0, 1), running(W1)], None,
     Action.FAIL, Reason.POD_FAILED),
    ("exit code 137 is retried under ExitCode", run_policy(restartPolicy="ExitCode"), [running(M), exited(W0, 137), running(W1)], None,
     Action.RESTART_GANG, Reason.POD_FAILED),
    ("the trainer's preempted-checkpoint-saved code 200 is retried under ExitCode", run_policy(restartPolicy="ExitCode"),
     [running(M), exited(W0, 200), running(W1)], None, Action.RESTART_GANG, Reason.POD_FAILED),
    ("a preemption restarts the gang without charging the failure budget", ONE_AND_TWO, [running(M4), preempted(W04), running(W14)],
     {"attempt": 4, "restarts": {"failures": 3, "total": 3}}, Action.RESTART_GANG, Reason.PREEMPTED),
    ("a preemption explains the peers that crashed with it", ONE_AND_TWO, [exited(M, 1), preempted(W0), exited(W1, 1)], None,
     Action.RESTART_GANG, Reason.PREEMPTED),
    ("a preemption after maxPreemptions fails the job", run_policy(maxPreemptions=2), [running(M4), preempted(W04), running(W14)],
     {"attempt": 4, "restarts": {"preemptions": 2, "total": 2}}, Action.FAIL, Reason.MAX_PREEMPTIONS_EXCEEDED),
    ("a suspended job suspends whatever its pods do", run_policy(suspend=True), ALL_RUNNING, None, Action.SUSPEND, Reason.SUSPENDED),
    ("a job past its deadline fails", run_policy(activeDeadlineSeconds=60), ALL_RUNNING, {"startTime": at(61)},
     Action.DEADLINE_EXCEEDED, Reason.DEADLINE_EXCEEDED),
    ("a finished job past its TTL is deleted", run_policy(ttlSecondsAfterFinished=30), [], finished(at(31)),
     Action.TTL_EXPIRED, Reason.TTL_EXPIRED),
    ("a finished job does nothing more, even with pods gone", ONE_AND_TWO, [], finished(at(5)), Action.WAIT, Reason.FINISHED),
    ("pods of an earlier attempt must go before the new attempt's are created", ONE_AND_TWO, [exited(M, 1)],
     {"attempt": 2, "restarts": {"preemptions": 1, "total": 1}}, Action.WAIT, Reason.WAITING_FOR_PREVIOUS_ATTEMPT),
    ("the next attempt after a failure waits out its backoff", ONE_AND_TWO, [],
     {"attempt": 2, "restarts": {"failures": 1, "total": 1}, "lastRestart": {"reason": "PodFailed", "time": at(2)}},
     Action.WAIT, Reason.BACKING_OFF),
    ("the next attempt after a failure starts once its backoff passed", ONE_AND_TWO, [],
     {"attempt": 2, "restarts": {"failures": 1, "total": 1}, "lastRestart": {"reason": "PodFailed", "time": at(6)}},
     Action.CREATE_MISSING, Reason.CREATING),
    ("the next attempt after a preemption starts at once", ONE_AND_TWO, [],
     {"attempt": 2, "restarts": {"preemptions": 1, "total": 1}, "lastRestart": {"reason": "Preempted", "time": at(0)}},
     Action.CREATE_MISSING, Reason.CREATING),
    ("a pod unschedulable past schedulingTimeoutSeconds fails the job", run_policy(schedulingTimeoutSeconds=30),
     [pending(M, unschedulable=True), running(W0), running(W1)], None, Action.FAIL, Reason.SCHEDULING_TIMEOUT),
]  # fmt: skip


@pytest.mark.parametrize(
    ("job", "children", "status", "action", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decide(
    job: dict[str, Any],
    children: list[dict[str, Any]],
    status: dict[str, Any] | None,
    action: Action,
    reason: Reason,
) -> None:
    got = decision(job, children, status)
    assert (got.action, got.reason) == (action, reason), got.message


@pytest.mark.parametrize(
    ("job", "children", "status", "requeue_after"),
    [
        pytest.param(run_policy(activeDeadlineSeconds=60), ALL_RUNNING, {"startTime": at(20)}, 40.0, id="wake up at the deadline"),
        pytest.param(run_policy(ttlSecondsAfterFinished=30), [], finished(at(10)), 20.0, id="wake up when the TTL expires"),
        pytest.param(ONE_AND_TWO, [], {"attempt": 2, "restarts": {"failures": 2, "total": 2},
                                        "lastRestart": {"reason": "PodFailed", "time": at(4)}}, 6.0, id="wake up when the backoff ends"),
        pytest.param(run_policy(schedulingTimeoutSeconds=120), [pending(M, unschedulable=True), running(W0), running(W1)], None, 60.0,
                     id="wake up when an unschedulable pod's timeout is due"),
        pytest.param(ONE_AND_TWO, ALL_RUNNING, None, None, id="nothing is due without timers"),
    ],
)  # fmt: skip
def test_time_based_checks_say_when_they_are_due(
    job: dict[str, Any],
    children: list[dict[str, Any]],
    status: dict[str, Any] | None,
    requeue_after: float | None,
) -> None:
    assert decision(job, children, status).requeue_after == requeue_after


def test_the_failure_message_names_the_pod_the_exit_code_and_the_node() -> None:
    got = decision(ONE_AND_TWO, [running(M), exited(W0, 3, message="loss is NaN"), running(W1)])
    assert got.message == "pod mnist-worker-0: Error, exit code 3, on node gpu-node-1: loss is NaN"


@pytest.mark.parametrize(("failures", "seconds"), [(1, 5.0), (2, 10.0), (3, 20.0), (7, 300.0), (20, 300.0)])
def test_failure_backoff_doubles_and_is_capped(failures: int, seconds: float) -> None:
    assert backoff_seconds(failures) == seconds
