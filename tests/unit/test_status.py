"""Status transitions: conditions keep their transition time, the phase summarises them, events mark changes."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest

from dtjob.api import Condition, ConditionType, JobStatus, Restarts
from dtjob.core.decide import RESTART_CHARGES, Action, Charge, Decision, Reason
from dtjob.core.status import Event, transition_events
from dtjob.core.status.codec import read_status
from tests.support.builders import NOW, SHARED_CHECKPOINTS, exited, manifest, pending, pods_of, running
from tests.support.plan import plan_for

JOB = manifest(("Worker", 2), checkpoint=SHARED_CHECKPOINTS)


def status_after(job: dict[str, Any], children: list[dict[str, Any]], seconds: int) -> dict[str, Any]:
    plan = plan_for(job, children, NOW + timedelta(seconds=seconds))
    return {**job, "status": plan.status} if plan.status is not None else job


def test_a_restarted_gang_running_again_clears_restarting_without_an_event_of_its_own() -> None:
    job = status_after(JOB, [], 0)
    first = pods_of(JOB, attempt=1)
    job = status_after(job, [running(first["mnist-worker-0"]), exited(first["mnist-worker-1"], 1)], 10)
    assert job["status"]["phase"] == "Restarting"
    job = status_after(job, [], 20)  # the old pods are gone and the backoff passed: attempt 2 is created
    second = [running(p) for p in pods_of(JOB, attempt=2).values()]
    plan = plan_for(job, second, NOW + timedelta(seconds=30))
    assert plan.status is not None and plan.status["phase"] == "Running" and plan.status["attempt"] == 2
    conditions = {c["type"]: (c["status"], c["lastTransitionTime"]) for c in plan.status["conditions"]}
    assert conditions == {
        "Created": ("True", "2030-01-01T12:00:00Z"),  # kept from the first pass: it never changed status
        "Restarting": ("False", "2030-01-01T12:00:30Z"),
        "Running": ("True", "2030-01-01T12:00:30Z"),
    }
    assert plan.events == [Event("Normal", "AllReplicasRunning", "2/2 pods of attempt 2 are running")]


def condition(type_: str, status: str, reason: str = "Because") -> Condition:
    return Condition.model_validate(
        {"type": type_, "status": status, "reason": reason, "lastTransitionTime": "2030-01-01T00:00:00Z"}
    )


@pytest.mark.parametrize(
    ("before", "after", "events"),
    [
        pytest.param([], [condition("Running", "True", "AllReplicasRunning")], [Event("Normal", "AllReplicasRunning", "")],
                     id="a condition appearing True is announced"),
        pytest.param([condition("Running", "True")], [condition("Running", "True", "Other")], [],
                     id="a condition whose status did not change is not announced"),
        pytest.param([condition("Running", "True")], [condition("Running", "False", "Succeeded")], [],
                     id="Running going False is implied by what ended it"),
        pytest.param([], [condition("Failed", "True", "BackoffLimitExceeded")], [Event("Warning", "BackoffLimitExceeded", "")],
                     id="failure is a warning"),
        pytest.param([], [condition("Restarting", "True", "Preempted")], [],
                     id="Restarting becoming True is told by the restart's own event"),
        pytest.param([condition("Suspended", "True")], [condition("Suspended", "False", "Resumed")], [Event("Normal", "Resumed", "")],
                     id="resuming is announced"),
    ],
)  # fmt: skip
def test_transition_events(before: list[Condition], after: list[Condition], events: list[Event]) -> None:
    assert transition_events(JobStatus(conditions=before), JobStatus(conditions=after)) == events


def test_every_restart_is_a_warning_naming_the_attempt_and_the_cause() -> None:
    restarting = JobStatus.model_validate(
        {"attempt": 2, "restarts": {"preemptions": 1, "total": 1},
         "lastRestart": {"reason": "Preempted", "message": "pod p: TerminationByKubelet", "time": "2030-01-01T00:00:00Z"}}
    )  # fmt: skip
    again = restarting.model_copy(
        update={
            "attempt": 3,
            "restarts": restarting.restarts.model_copy(update={"preemptions": 2, "total": 2}),
        }
    )
    assert transition_events(JobStatus(), restarting) == [
        Event("Warning", "Preempted", "attempt 2: pod p: TerminationByKubelet")
    ]
    assert transition_events(restarting, again) == [
        Event("Warning", "Preempted", "attempt 3: pod p: TerminationByKubelet")
    ]
    assert transition_events(again, again) == []


def test_an_unreadable_stored_status_does_not_wedge_the_job() -> None:
    job = {**JOB, "status": {"attempt": "not a number", "conditions": "garbage"}}
    plan = plan_for(job, [], NOW)
    assert plan.status is not None and plan.status["attempt"] == 1 and len(plan.create) == 2


def test_a_status_written_by_a_newer_operator_keeps_its_attempt() -> None:
    job = {**JOB, "status": {"attempt": 7, "futureField": {"x": 1}, "conditions": []}}
    plan = plan_for(job, [], NOW)
    assert plan.status is not None and plan.status["attempt"] == 7
    assert {p["metadata"]["labels"]["training.dtjob.io/attempt"] for p in plan.create} == {"7"}


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param({"type": "Degraded", "status": "True", "reason": "Newer", "lastTransitionTime": "2030-01-01T11:00:00Z"},
                     id="a condition type this version does not know"),
        pytest.param({"type": "Running", "status": "Maybe", "reason": "Newer", "lastTransitionTime": "2030-01-01T11:00:00Z"},
                     id="a condition status this version does not know"),
    ],
)  # fmt: skip
def test_a_status_a_newer_operator_wrote_keeps_attempt_and_counters_on_rollback(
    stored: dict[str, Any],
) -> None:
    status = {
        "phase": "Warming",  # a phase this version does not know
        "attempt": 3,
        "createdAttempt": 3,
        "restarts": {"failures": 1, "preemptions": 1, "total": 2},
        "conditions": [
            {"type": "Created", "status": "True", "reason": "Created", "lastTransitionTime": "2030-01-01T11:00:00Z"},
            stored,
        ],
        "replicaStatuses": [{"role": "Coordinator", "active": 1}, {"role": "Worker", "active": 2}],
    }  # fmt: skip
    old = read_status(status)
    assert (old.attempt, old.created_attempt, old.restarts.total, old.phase) == (3, 3, 2, None)
    assert [c.type for c in old.conditions] == ["Created"]
    assert [r.role for r in old.replica_statuses] == ["Worker"]


def test_every_status_the_operator_writes_reads_back_identically() -> None:
    plan = plan_for(JOB, [], NOW)
    assert plan.status is not None
    assert (
        JobStatus.model_validate(plan.status).model_dump(mode="json", by_alias=True, exclude_none=True)
        == plan.status
    )
    assert ConditionType(plan.status["conditions"][0]["type"]) == ConditionType.CREATED


def test_an_unschedulable_pod_shows_the_schedulers_message_until_every_pod_is_placed() -> None:
    job = status_after(manifest(("Worker", 2), runPolicy={"schedulingTimeoutSeconds": 600}), [], 0)
    pods = pods_of(job)
    waiting = [pending(pods["mnist-worker-0"]), pending(pods["mnist-worker-1"], unschedulable=True)]
    plan = plan_for(job, waiting, NOW + timedelta(seconds=5))
    assert plan.status is not None and plan.status["phase"] == "Pending"
    unschedulable = next(c for c in plan.status["conditions"] if c["type"] == "Unschedulable")
    message = (
        "1 pod(s) cannot be scheduled (mnist-worker-1); the job fails after schedulingTimeoutSeconds (600s): "
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )
    assert (unschedulable["status"], unschedulable["reason"], unschedulable["message"]) == (
        "True", "PodUnschedulable", message,
    )  # fmt: skip
    assert Event("Warning", "PodUnschedulable", message) in plan.events
    placed = plan_for(
        {**job, "status": plan.status}, [running(p) for p in pods.values()], NOW + timedelta(seconds=9)
    )
    assert placed.status is not None
    assert {c["type"]: (c["status"], c["reason"]) for c in placed.status["conditions"]}["Unschedulable"] == (
        "False", "Scheduled",
    )  # fmt: skip


def test_a_pod_no_node_of_its_placement_group_can_take_says_what_gke_offers() -> None:
    """The selector names a compact placement group no node carries: the condition says where GKE offers
    one; a pod short of GPUs is not told about placement."""
    accelerator = {"type": "nvidia-l4", "count": 1, "placementGroup": "pg-1"}
    job = status_after(manifest(("Worker", 2), accelerator=accelerator), [], 0)
    pods = pods_of(job)
    no_group = copy.deepcopy(pending(pods["mnist-worker-0"], unschedulable=True))
    no_group["status"]["conditions"][0]["message"] = (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )
    plan = plan_for(job, [no_group, pending(pods["mnist-worker-1"])], NOW + timedelta(seconds=5))
    assert plan.status is not None
    message = next(c for c in plan.status["conditions"] if c["type"] == "Unschedulable")["message"]
    assert "cloud.google.com/gke-placement-group=pg-1 (accelerator.placementGroup)" in message
    assert "--placement-type=COMPACT" in message and message.endswith("(docs/gke.md#compact-placement)")
    short = plan_for(job, [pending(p, unschedulable=True) for p in pods.values()], NOW + timedelta(seconds=5))
    assert short.status is not None
    message = next(c for c in short.status["conditions"] if c["type"] == "Unschedulable")["message"]
    assert "placement" not in message


def test_a_pod_gated_by_kueues_pod_integration_is_unschedulable_saying_what_to_change() -> None:
    """Kueue's pod webhook gated a pod of the gang as a plain pod of its own (its owner not among Kueue's
    external frameworks): the scheduler only says the pod is gated; the condition says why and what to do."""
    job = status_after(manifest(("Worker", 2)), [], 0)
    pods = pods_of(job)
    gated = copy.deepcopy(pending(pods["mnist-worker-1"]))
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    gated["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                      "message": "Scheduling is blocked due to non-empty scheduling gates"}]  # fmt: skip
    plan = plan_for(job, [pending(pods["mnist-worker-0"]), gated], NOW + timedelta(seconds=5))
    assert plan.status is not None
    condition = next(c for c in plan.status["conditions"] if c["type"] == "Unschedulable")
    assert (condition["status"], condition["reason"]) == ("True", "PodUnschedulable")
    assert condition["message"].startswith(
        "1 pod(s) cannot be scheduled (mnist-worker-1): held by Kueue's pod"
    )
    assert "integrations.externalFrameworks" in condition["message"]
    # A gate of another kind (TAS's, which dtjob itself adds) is not Kueue's pod integration.
    topology = copy.deepcopy(gated)
    topology["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    plan = plan_for(job, [pending(pods["mnist-worker-0"]), topology], NOW + timedelta(seconds=5))
    assert plan.status is not None
    assert ("Unschedulable", "True") not in {(c["type"], c["status"]) for c in plan.status["conditions"]}


def test_suspending_a_job_whose_pods_wait_for_nodes_clears_unschedulable() -> None:
    job = status_after(JOB, [], 0)
    waiting = [pending(p, unschedulable=True) for p in pods_of(job).values()]
    job = status_after(job, waiting, 5)
    assert {c["type"]: c["status"] for c in job["status"]["conditions"]}["Unschedulable"] == "True"
    suspended = {**job, "spec": {**job["spec"], "runPolicy": {"suspend": True}}}
    plan = plan_for(suspended, waiting, NOW + timedelta(seconds=9))
    assert plan.status is not None and plan.status["phase"] == "Suspended"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in plan.status["conditions"]}
    assert conditions["Unschedulable"] == ("False", "Scheduled")


def test_a_gang_without_a_checkpoint_volume_is_warned_once_and_the_warning_goes_with_a_volume() -> None:
    unshared = manifest(("Worker", 2))
    plan = plan_for(unshared, [], NOW)
    assert plan.status is not None
    warning = next(c for c in plan.status["conditions"] if c["type"] == "CheckpointNotShared")
    assert (warning["status"], warning["reason"]) == ("True", "CheckpointNotShared")
    assert "spec.checkpoint.volume" in warning["message"]
    assert Event("Warning", "CheckpointNotShared", warning["message"]) in plan.events
    assert plan.status["phase"] == "Pending"  # a warning: the job runs
    again = plan_for({**unshared, "status": plan.status}, [], NOW + timedelta(seconds=5))
    assert [e for e in again.events if e.reason == "CheckpointNotShared"] == []  # said once
    fixed = {
        **unshared,
        "spec": {**unshared["spec"], "checkpoint": SHARED_CHECKPOINTS},
        "status": plan.status,
    }
    cleared = plan_for(fixed, [], NOW + timedelta(seconds=10))
    assert cleared.status is not None
    assert (
        next(c for c in cleared.status["conditions"] if c["type"] == "CheckpointNotShared")["status"]
        == "False"
    )


def test_every_reason_says_which_counter_a_gang_restart_for_it_is_charged_to() -> None:
    """A new Reason has to be placed in RESTART_CHARGES: before the table, a restart for a reason the
    status code did not name was counted as a failure, against backoffLimit."""
    assert set(RESTART_CHARGES) == set(Reason)
    assert {charge.value for charge in Charge} <= set(Restarts.model_fields)
    charged = {reason: charge for reason, charge in RESTART_CHARGES.items() if charge is not None}
    assert charged == {
        Reason.POD_FAILED: Charge.FAILURES,
        Reason.PREEMPTED: Charge.PREEMPTIONS,
        Reason.PROGRESS_DEADLINE_EXCEEDED: Charge.HANGS,
        Reason.SLOW_RANK: Charge.SLOW_RANKS,
        Reason.REQUEUED: Charge.REQUEUES,
    }


def test_a_gang_restart_for_a_reason_charged_to_no_counter_is_refused_where_it_is_decided() -> None:
    with pytest.raises(ValueError, match="RepeatedFailure is charged to no counter"):
        Decision(Action.RESTART_GANG, Reason.REPEATED_FAILURE, "two attempts failed alike")
    assert Decision(Action.FAIL, Reason.REPEATED_FAILURE).reason == Reason.REPEATED_FAILURE
