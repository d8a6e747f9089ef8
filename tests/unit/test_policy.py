"""decide(): one table, one row per situation a gang can be in."""

from __future__ import annotations

import runpy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dtjob.api import TRAINER_CHECKPOINT_SAVED_EXIT_CODE, DistributedTrainingJobSpec, JobStatus, RestartPolicy
from dtjob.core.decide import (
    MESSAGE_TAIL_CHARS,
    Action,
    Decision,
    Facts,
    Fault,
    Reason,
    backoff_seconds,
    decide,
    fault_of,
)
from dtjob.core.frameworks import Gang
from dtjob.core.names import JobRef
from dtjob.core.observed import classify, observe
from tests.support.builders import (
    NOW,
    deleting,
    disrupted_while_running,
    exited,
    manifest,
    node,
    pending,
    pods_of,
    preempted,
    pulling,
    running,
)

REPO = Path(__file__).resolve().parents[2]
TRAINER_EXIT_CODES = REPO / "trainer-images" / "runtime" / "src" / "dtjob_trainer" / "exit_codes.py"

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
    job: dict[str, Any],
    children: list[dict[str, Any]],
    status: dict[str, Any] | None = None,
    nodes: list[dict[str, Any]] | None = None,
) -> Decision:
    spec = DistributedTrainingJobSpec.model_validate(job["spec"])
    current = JobStatus.model_validate(status or {})
    gang = Gang.of(JobRef.of(job), spec, current.attempt)
    return decide(Facts(spec, current, gang, observe(children, NOW, nodes), NOW))


ALL_RUNNING = [running(M), running(W0), running(W1)]
CREATED = {"createdAttempt": 1}
# The settle window (runPolicy.failureSettleSeconds, 30 s by default) of a gang broken 30 s ago is over.
SETTLED = {"brokenSince": at(30)}
TF_WITH_EVALUATOR = manifest(("Chief", 1), ("Worker", 1), ("Evaluator", 1), framework="TensorFlow")
TF = pods_of(TF_WITH_EVALUATOR)
SAVED_BY_TORCHRUN = (
    '{"reason": "PreemptedCheckpointSaved", "message": "stopped and saved after step 7", "step": 7}'
)
STUCK_IMAGE = pulling(W0, "ImagePullBackOff", scheduled="2030-01-01T11:50:00Z")

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
    ("a failed Worker whose peers still run is watched before anything is charged", ONE_AND_TWO,
     [running(M), exited(W0, 1), running(W1)], None, Action.WAIT, Reason.SETTLING),
    ("a failed Worker restarts the gang under OnFailure once the settle window is over", ONE_AND_TWO,
     [running(M), exited(W0, 1), running(W1)], SETTLED, Action.RESTART_GANG, Reason.POD_FAILED),
    ("a failure is charged at once when no member still runs", ONE_AND_TWO, [exited(M, 1), exited(W0, 1), exited(W1, 1)], None,
     Action.RESTART_GANG, Reason.POD_FAILED),
    ("a failure is charged at once with failureSettleSeconds 0", run_policy(failureSettleSeconds=0),
     [running(M), exited(W0, 1), running(W1)], None, Action.RESTART_GANG, Reason.POD_FAILED),
    ("a failure after backoffLimit restarts fails the job", ONE_AND_TWO, [running(M4), exited(W04, 1), running(W14)],
     {"attempt": 4, "restarts": {"failures": 3, "total": 3}, **SETTLED}, Action.FAIL, Reason.BACKOFF_LIMIT_EXCEEDED),
    ("any failure fails the job under Never", run_policy(restartPolicy="Never"), [running(M), exited(W0, 137), running(W1)], SETTLED,
     Action.FAIL, Reason.POD_FAILED),
    ("exit code 1 is permanent under ExitCode", run_policy(restartPolicy="ExitCode"), [running(M), exited(W0, 1), running(W1)], SETTLED,
     Action.FAIL, Reason.POD_FAILED),
    ("exit code 1 under ExitCode is watched too: a preemption may explain it", run_policy(restartPolicy="ExitCode"),
     [running(M), exited(W0, 1), running(W1)], None, Action.WAIT, Reason.SETTLING),
    ("a peer's exit 1 before the preemption shows is a preemption under ExitCode", run_policy(restartPolicy="ExitCode"),
     [running(M), exited(W0, 1), preempted(W1)], {"brokenSince": at(10)}, Action.RESTART_GANG, Reason.PREEMPTED),
    ("a peer's exit 1 beside a member being taken away is a preemption", run_policy(restartPolicy="ExitCode"),
     [running(M), exited(W0, 1), disrupted_while_running(W1, "TerminationByKubelet")], None, Action.RESTART_GANG, Reason.PREEMPTED),
    ("exit code 137 is retried under ExitCode", run_policy(restartPolicy="ExitCode"), [running(M), exited(W0, 137), running(W1)], SETTLED,
     Action.RESTART_GANG, Reason.POD_FAILED),
    ("the trainer's preempted-checkpoint-saved code 200 is a preemption under ExitCode", run_policy(restartPolicy="ExitCode"),
     [running(M), exited(W0, 200), running(W1)], None, Action.RESTART_GANG, Reason.PREEMPTED),
    ("torchrun's exit 1 after its workers saved a checkpoint on SIGTERM is a preemption", run_policy(restartPolicy="ExitCode"),
     [running(M), exited(W0, 1, message=SAVED_BY_TORCHRUN), running(W1)], None, Action.RESTART_GANG, Reason.PREEMPTED),
    ("a member deleted by hand makes its peers' checkpoint-saved stops a failure", ONE_AND_TWO,
     [running(M), deleting(running(W0)), exited(W1, 200)], {**CREATED, **SETTLED}, Action.RESTART_GANG, Reason.POD_FAILED),
    ("a member deleted by hand is a failure even when it saved a checkpoint on its SIGTERM", ONE_AND_TWO,
     [exited(M, 200), deleting(exited(W0, 200)), exited(W1, 200)], CREATED, Action.RESTART_GANG, Reason.POD_FAILED),
    ("an Evaluator's failure restarts nothing", TF_WITH_EVALUATOR,
     [running(TF["mnist-chief-0"]), running(TF["mnist-worker-0"]), exited(TF["mnist-evaluator-0"], 1)], CREATED,
     Action.WAIT, Reason.IN_PROGRESS),
    ("a PS's failure restarts the gang", manifest(("Chief", 1), ("Worker", 1), ("PS", 1), framework="TensorFlow"),
     [running(p) if "ps" not in n else exited(p, 1) for n, p in
      pods_of(manifest(("Chief", 1), ("Worker", 1), ("PS", 1), framework="TensorFlow")).items()], {**CREATED, **SETTLED},
     Action.RESTART_GANG, Reason.POD_FAILED),
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
    ("a member that vanished after its attempt was created restarts the gang as a failure", ONE_AND_TWO,
     [running(M), running(W1)], {**CREATED, **SETTLED}, Action.RESTART_GANG, Reason.POD_FAILED),
    ("a vanished member fails the job under Never", run_policy(restartPolicy="Never"), [running(M), running(W1)],
     {**CREATED, **SETTLED}, Action.FAIL, Reason.POD_FAILED),
    ("a running member deleted without a disruption condition restarts the gang at its deletion", ONE_AND_TWO,
     [running(M), deleting(running(W0)), running(W1)], {**CREATED, **SETTLED}, Action.RESTART_GANG, Reason.POD_FAILED),
    ("an evicted member restarts the gang as a preemption", ONE_AND_TWO,
     [running(M), deleting(disrupted_while_running(W0, "EvictionByEvictionAPI")), running(W1)], CREATED,
     Action.RESTART_GANG, Reason.PREEMPTED),
    ("an image error that persists fails the job even under OnFailure", ONE_AND_TWO, [running(M), STUCK_IMAGE, running(W1)],
     None, Action.FAIL, Reason.POD_FAILED),
    ("a permanent failure among retryable ones fails the job", run_policy(restartPolicy="ExitCode"),
     [exited(M, 143), exited(W0, 137), exited(W1, 2)], None, Action.FAIL, Reason.POD_FAILED),
    ("the trainer's checkpoint-saved code is a preemption even under Never", run_policy(restartPolicy="Never"),
     [running(M), exited(W0, 200), running(W1)], None, Action.RESTART_GANG, Reason.PREEMPTED),
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
        pytest.param(ONE_AND_TWO, [running(M), exited(W0, 1), running(W1)], {"brokenSince": at(10)}, 20.0,
                     id="wake up when the settle window ends"),
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
    got = decision(ONE_AND_TWO, [running(M), exited(W0, 3, message="loss is NaN"), running(W1)], SETTLED)
    assert got.message == "pod mnist-worker-0: Error, exit code 3, on node gpu-node-1: loss is NaN"


def test_a_long_termination_message_is_cut_to_its_last_lines() -> None:
    log = (
        "\n".join(f"step {i}: loss 0.{i:04d}" for i in range(200))
        + "\nPermissionError: [Errno 13] /models/out.pt"
    )
    got = decision(ONE_AND_TWO, [running(M), exited(W0, 1, message=log), running(W1)], SETTLED)
    assert got.message.endswith("PermissionError: [Errno 13] /models/out.pt")
    assert ": ...\nstep " in got.message and len(got.message) < MESSAGE_TAIL_CHARS + 100


def test_a_settling_gang_says_what_ended_and_how_long_it_is_watched() -> None:
    got = decision(ONE_AND_TWO, [running(M), exited(W0, 1, message="boom"), running(W1)])
    assert got.message == (
        "pod mnist-worker-0: Error, exit code 1, on node gpu-node-1: boom; "
        "watching the gang for a disruption for up to 30s before charging a failure"
    )
    assert got.requeue_after == 30.0


def test_a_peer_whose_node_stopped_reporting_makes_the_crash_a_preemption() -> None:
    elsewhere = running(W1)
    elsewhere["spec"]["nodeName"] = "gpu-node-2"
    pods = [running(M), exited(W0, 1), elsewhere]
    fresh_trouble = node("gpu-node-2", ready="Unknown", since=at(5))  # not yet past NODE_NOT_READY_GRACE
    assert decision(ONE_AND_TWO, pods, None, [node(), node("gpu-node-2")]).reason == Reason.SETTLING
    got = decision(ONE_AND_TWO, pods, None, [node(), fresh_trouble])
    assert (got.action, got.reason) == (Action.RESTART_GANG, Reason.PREEMPTED)
    assert got.message.startswith(
        "pod mnist-worker-1 is being taken away (node gpu-node-2 is not Ready (Ready=Unknown"
    )
    tainted = node("gpu-node-2")
    tainted["spec"] = {
        "taints": [{"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}]
    }
    assert decision(ONE_AND_TWO, pods, None, [node(), tainted]).reason == Reason.PREEMPTED


def test_a_member_whose_node_was_deleted_restarts_the_gang_as_a_preemption() -> None:
    assert decision(ONE_AND_TWO, ALL_RUNNING, CREATED, nodes=[node()]).action == Action.WAIT
    got = decision(ONE_AND_TWO, ALL_RUNNING, CREATED, nodes=[])
    assert (got.action, got.reason) == (Action.RESTART_GANG, Reason.PREEMPTED)


@pytest.mark.parametrize(
    ("message_of", "message"),
    [
        pytest.param(lambda: decision(ONE_AND_TWO, [running(M), running(W1)], {**CREATED, **SETTLED}),
                     "pod mnist-worker-0: Vanished: the pod is gone before its end was seen (deleted, or removed with its node)",
                     id="a vanished member is named"),
        pytest.param(lambda: decision(ONE_AND_TWO, ALL_RUNNING, None, []),
                     "pod mnist-master-0: NodeLost, on node gpu-node-1: node gpu-node-1 no longer exists",
                     id="a lost node is named with the pod on it"),
        pytest.param(lambda: decision(ONE_AND_TWO, [running(M), STUCK_IMAGE, running(W1)]),
                     'pod mnist-worker-0: ImagePullBackOff, on node gpu-node-1: image trainer:1: Back-off pulling image "trainer:1" '
                     "(image errors that persist are permanent)",
                     id="a persisting image error names the image"),
        pytest.param(lambda: decision(run_policy(restartPolicy="ExitCode"), [running(M), exited(W0, 200), running(W1)]),
                     "pod mnist-worker-0: Error, exit code 200, on node gpu-node-1 (the trainer was stopped by SIGTERM and saved a checkpoint)",
                     id="the trainer's checkpoint-saved exit is explained"),
        pytest.param(lambda: decision(run_policy(maxPreemptions=0), [running(M), preempted(W0), running(W1)]),
                     "maxPreemptions (0) reached; last: pod mnist-worker-0: TerminationByKubelet, exit code 143, on node gpu-node-1: "
                     "Pod was terminated in response to imminent node shutdown.",
                     id="an exhausted preemption budget says so and names the last preemption"),
    ],
)  # fmt: skip
def test_decisions_say_which_pod_on_which_node_and_why(message_of: Any, message: str) -> None:
    assert message_of().message == message


R = RestartPolicy
FAULTS = [
    ("a preemption is a preemption even under Never", preempted(W0), R.NEVER, Fault.PREEMPTION),
    ("exit 1 under OnFailure is retried", exited(W0, 1), R.ON_FAILURE, Fault.RETRYABLE),
    ("exit 1 under ExitCode is permanent", exited(W0, 1), R.EXIT_CODE, Fault.PERMANENT),
    ("exit 127 under ExitCode is permanent", exited(W0, 127), R.EXIT_CODE, Fault.PERMANENT),
    ("exit 137 (SIGKILL) under ExitCode is retried", exited(W0, 137), R.EXIT_CODE, Fault.RETRYABLE),
    ("exit 143 (SIGTERM) under ExitCode is retried", exited(W0, 143), R.EXIT_CODE, Fault.RETRYABLE),
    ("exit 255 under ExitCode is retried", exited(W0, 255), R.EXIT_CODE, Fault.RETRYABLE),
    ("an OOM kill under OnFailure is retried", exited(W0, 137, reason="OOMKilled"), R.ON_FAILURE, Fault.RETRYABLE),
    ("an OOM kill under ExitCode is retried like its signal", exited(W0, 137, reason="OOMKilled"), R.EXIT_CODE, Fault.RETRYABLE),
    ("an OOM kill under Never is permanent", exited(W0, 137, reason="OOMKilled"), R.NEVER, Fault.PERMANENT),
    ("the trainer's checkpoint-saved exit under ExitCode is a preemption", exited(W0, 200), R.EXIT_CODE, Fault.PREEMPTION),
    ("the trainer's checkpoint-saved exit under Never is a preemption", exited(W0, 200), R.NEVER, Fault.PREEMPTION),
    ("torchrun's exit 1 with the trainer's checkpoint-saved message is a preemption",
     exited(W0, 1, message=SAVED_BY_TORCHRUN), R.EXIT_CODE, Fault.PREEMPTION),
    ("a JSON termination message of another reason is that reason", exited(W0, 1, message='{"reason": "TerminatedWithoutCheckpoint"}'),
     R.EXIT_CODE, Fault.PERMANENT),
    ("a signal under Never is permanent", exited(W0, 143), R.NEVER, Fault.PERMANENT),
    ("a member deleted without a word under OnFailure is retried", deleting(running(W0)), R.ON_FAILURE, Fault.RETRYABLE),
    ("a member deleted without a word under ExitCode is retried, having no exit code", deleting(running(W0)), R.EXIT_CODE, Fault.RETRYABLE),
    ("a member deleted without a word under Never is permanent", deleting(running(W0)), R.NEVER, Fault.PERMANENT),
    ("an image error that persists is permanent under OnFailure", STUCK_IMAGE, R.ON_FAILURE, Fault.PERMANENT),
    ("an invalid image name is permanent under ExitCode", pulling(W0, "InvalidImageName"), R.EXIT_CODE, Fault.PERMANENT),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "policy", "fault"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_fault_of(pod: dict[str, Any], policy: RestartPolicy, fault: Fault) -> None:
    assert fault_of(classify(pod, NOW), policy)[0] == fault


def test_the_checkpoint_saved_exit_code_mirrors_the_trainer_runtimes() -> None:
    trainer = runpy.run_path(str(TRAINER_EXIT_CODES))
    assert trainer["PREEMPTED_CHECKPOINT_SAVED"] == TRAINER_CHECKPOINT_SAVED_EXIT_CODE


@pytest.mark.parametrize(("failures", "seconds"), [(1, 5.0), (2, 10.0), (3, 20.0), (7, 300.0), (20, 300.0)])
def test_failure_backoff_doubles_and_is_capped(failures: int, seconds: float) -> None:
    assert backoff_seconds(failures) == seconds


CRASH_AT_30 = (
    'Traceback (most recent call last):\n  File "/app/train.py", line 9, in step\nValueError: bad batch'
)
M2, W02, W12 = pods_of(ONE_AND_TWO, attempt=2).values()
FAILED_AT_30 = {
    "reason": "PodFailed",
    "time": at(60),
    "step": 30,
    "failures": [{"reason": "Error", "exitCode": 1, "error": "ValueError: bad batch", "where": "train.py:9"}],
}


def second_attempt(step: int, **status: Any) -> dict[str, Any]:
    progress = {"attempt": 2, "step": step, "updatedAt": at(5)}
    return {"attempt": 2, "restarts": {"failures": 1, "total": 1}, "lastRestart": FAILED_AT_30,
            "progress": progress, **SETTLED, **status}  # fmt: skip


def test_a_second_attempt_failing_the_same_way_at_the_same_step_fails_the_job() -> None:
    children = [running(M2), exited(W02, 1, message=CRASH_AT_30), running(W12)]
    got = decision(ONE_AND_TWO, children, second_attempt(31))
    assert (got.action, got.reason) == (Action.FAIL, Reason.REPEATED_FAILURE)
    assert got.message.startswith(
        "attempts 1 and 2 failed the same way at step 31 (the one before at 30): ValueError: bad batch at "
        "train.py:9 (Error, exit code 1); another attempt would too (runPolicy.stopOnRepeatedFailure); "
        "last: pod mnist-worker-0: Error, exit code 1, on node gpu-node-1: Traceback"
    ), got.message
    # Opted out, or failing at another step or in another way: the backoffLimit is spent as before.
    opted_out = run_policy(stopOnRepeatedFailure=False)
    assert decision(opted_out, children, second_attempt(31)).action == Action.RESTART_GANG
    assert decision(ONE_AND_TWO, children, second_attempt(90)).action == Action.RESTART_GANG
    other = [running(M2), exited(W02, 1, message=CRASH_AT_30.replace("line 9", "line 10")), running(W12)]
    restart = decision(ONE_AND_TWO, other, second_attempt(31))
    assert (restart.action, restart.step) == (Action.RESTART_GANG, 31)
    assert [f.where for f in restart.failures] == ["train.py:10"]


def test_the_first_member_to_end_is_the_cause_and_its_failure_is_kept_first() -> None:
    peer_lost = "RuntimeError: Connection closed by peer [10.0.0.7]:29500"
    children = [
        exited(M, 1, message=peer_lost, finished="2030-01-01T11:59:58Z"),
        exited(W0, 1, message=CRASH_AT_30, finished="2030-01-01T11:59:57Z"),
        exited(W1, 1, message=peer_lost, finished="2030-01-01T11:59:58Z"),
    ]
    got = decision(ONE_AND_TWO, children)
    assert got.message.startswith("pod mnist-worker-0: Error, exit code 1"), got.message
    assert [f.error for f in got.failures] == ["ValueError: bad batch", peer_lost]
