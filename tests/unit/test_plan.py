"""plan_for(): whole passes, from a job and its children to the Plan the Kopf adapter executes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dtjob.core.plan import Delete, Event, Relabel
from dtjob.core.reconcile import refused_pods
from dtjob.core.render import render_children
from dtjob.core.world import Needs
from tests.support.builders import (
    NOW,
    container,
    deleted_at,
    deleting,
    exited,
    manifest,
    node,
    pods_of,
    preempted,
    preflight_ended,
    preflight_outcome,
    running,
    service_of,
    template,
)
from tests.support.plan import JOB, NAMES, after, applied, condition, deleted, needs_for, plan_for


def job_with(**run_policy: Any) -> dict[str, Any]:
    return {**JOB, "spec": {**JOB["spec"], "runPolicy": run_policy}}


def started(job: dict[str, Any] = JOB) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A job after its first pass, and its pods (as created, no status)."""
    return after(job, plan_for(job, [], NOW)), pods_of(job)


def test_a_fresh_job_applies_its_service_and_pods_and_records_that_it_was_created() -> None:
    plan = plan_for(JOB, [], NOW)
    assert applied(plan) == ["Service/mnist", *(f"Pod/{n}" for n in NAMES)]
    assert plan.delete == [] and plan.delete_job is False and plan.requeue_after is None
    assert plan.status is not None
    assert (plan.status["phase"], plan.status["attempt"], plan.status["startTime"], plan.status["replicasReady"]) == (
        "Pending", 1, "2030-01-01T12:00:00Z", "0/3")  # fmt: skip
    assert [(c["type"], c["status"], c["reason"]) for c in plan.status["conditions"]] == [
        ("Created", "True", "Created")
    ]
    assert plan.status["observedGeneration"] == 1
    assert plan.events == [Event("Normal", "Created", "created the pods of attempt 1")]


def test_running_pods_make_the_job_running_and_a_quiet_pass_writes_nothing() -> None:
    job, pods = started()
    children = [service_of(JOB), *(running(p) for p in pods.values())]
    plan = plan_for(job, children, NOW + timedelta(seconds=10))
    assert (
        plan.status is not None
        and plan.status["phase"] == "Running"
        and plan.status["replicasReady"] == "3/3"
    )
    assert plan.status["replicaStatuses"] == [
        {"role": "Master", "active": 1, "ready": 1, "succeeded": 0, "failed": 0},
        {"role": "Worker", "active": 2, "ready": 2, "succeeded": 0, "failed": 0},
    ]
    assert plan.events == [Event("Normal", "AllReplicasRunning", "3/3 pods of attempt 1 are running")]
    assert (applied(plan), plan.relabel) == ([], [])  # live children as rendered: nothing is written
    running_job = after(job, plan)
    quiet = plan_for(running_job, children, NOW + timedelta(seconds=40))
    assert (quiet.status, quiet.events, quiet.delete) == (None, [], [])
    assert condition(running_job, "Running")["lastTransitionTime"] == "2030-01-01T12:00:10Z"  # type: ignore[index]


@pytest.mark.parametrize(
    ("clean_pod_policy", "deleted_pods"),
    [
        pytest.param(
            "Running", ["mnist-worker-0", "mnist-worker-1"], id="Running deletes the pods still running"
        ),
        pytest.param("All", NAMES, id="All deletes every pod"),
        pytest.param("None", [], id="None keeps every pod"),
    ],
)
def test_rank_zero_success_completes_the_job_and_cleans_pods_by_policy(
    clean_pod_policy: str, deleted_pods: list[str]
) -> None:
    job, pods = started(job_with(cleanPodPolicy=clean_pod_policy))
    children = [
        exited(pods["mnist-master-0"], 0),
        running(pods["mnist-worker-0"]),
        running(pods["mnist-worker-1"]),
    ]
    plan = plan_for(job, children, NOW + timedelta(minutes=5))
    assert plan.status is not None and plan.status["phase"] == "Succeeded"
    assert plan.status["completionTime"] == "2030-01-01T12:05:00Z"
    assert deleted(plan) == deleted_pods and applied(plan) == []
    assert all(d.uid and d.uid.startswith(f"uid-{d.name}") for d in plan.delete)
    assert Event("Normal", "RankZeroSucceeded", "rank-0 pod mnist-master-0 succeeded") in plan.events
    # A finished job stays finished: later passes neither apply nor change anything.
    done = after(job, plan)
    remaining = [c for c in children if c["metadata"]["name"] not in deleted_pods]
    settled = after(done, plan_for(done, remaining, NOW + timedelta(minutes=6)))
    again = plan_for(settled, remaining, NOW + timedelta(minutes=7))
    assert (applied(again), again.delete, again.status, again.events) == ([], [], None, [])


def test_suspend_deletes_the_pods_keeps_the_service_and_resume_recreates_them() -> None:
    job, pods = started()
    children = [service_of(JOB), *(running(p) for p in pods.values())]
    suspended_job = {**job, "spec": {**job["spec"], "runPolicy": {"suspend": True}}}
    plan = plan_for(suspended_job, children, NOW + timedelta(minutes=1))
    assert deleted(plan) == NAMES and applied(plan) == []  # the Service stays as it is
    assert plan.status is not None and plan.status["phase"] == "Suspended"
    assert Event("Normal", "Suspended", "the job is suspended: its pods are deleted") in plan.events
    suspended_job = after(suspended_job, plan)

    resumed_job = {**suspended_job, "spec": {**suspended_job["spec"], "runPolicy": {"suspend": False}}}
    resume = plan_for(resumed_job, [service_of(JOB)], NOW + timedelta(minutes=2))
    assert applied(resume) == [f"Pod/{n}" for n in NAMES]
    assert resume.status is not None and resume.status["startTime"] == "2030-01-01T12:02:00Z"
    assert condition(after(resumed_job, resume), "Suspended") == {
        "type": "Suspended", "status": "False", "reason": "Resumed", "message": "the job was resumed",
        "lastTransitionTime": "2030-01-01T12:02:00Z", "observedGeneration": 1}  # fmt: skip
    assert Event("Normal", "Resumed", "the job was resumed") in resume.events


def test_the_active_deadline_fails_the_job_and_deletes_every_pod_whatever_the_clean_policy() -> None:
    job, pods = started(job_with(activeDeadlineSeconds=60, cleanPodPolicy="None"))
    children = [running(p) for p in pods.values()]
    early = plan_for(job, children, NOW + timedelta(seconds=20))
    assert early.requeue_after == 40.0 and early.delete == []
    plan = plan_for(job, children, NOW + timedelta(seconds=61))
    assert deleted(plan) == NAMES and plan.status is not None and plan.status["phase"] == "Failed"
    failed = condition(after(job, plan), "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    assert plan.events[0].type == "Warning" and plan.events[0].reason == "DeadlineExceeded"
    # Pods that outlive the pass (a failed delete) are deleted again on the next one.
    assert deleted(plan_for(after(job, plan), children, NOW + timedelta(seconds=70))) == NAMES


def test_the_ttl_after_finishing_deletes_the_job() -> None:
    job, pods = started(job_with(ttlSecondsAfterFinished=30))
    plan = plan_for(job, [exited(pods["mnist-master-0"], 0)], NOW + timedelta(seconds=10))
    assert plan.requeue_after == 30.0 and plan.delete_job is False
    finished = after(job, plan)
    assert plan_for(finished, [], NOW + timedelta(seconds=30)).delete_job is False
    expired = plan_for(finished, [], NOW + timedelta(seconds=40))
    assert expired.delete_job is True and (applied(expired), expired.delete) == ([], [])


@pytest.mark.parametrize(
    ("spec_change", "message"),
    [
        pytest.param({"replicas": [{"role": "Chief", "count": 1, "template": template()}]},
                     "spec.replicas[].role must be Master or Worker for a PyTorch job", id="a role CEL would reject"),
        pytest.param({"replicas": [{"role": "Worker", "count": 1, "template": template({"name": "trainer"})}]},
                     "spec.replicas[0].template.spec.containers[0].image is required", id="a container without an image"),
        pytest.param({"accelerator": {"type": "nvidia-l4", "count": 1}, "torch": {"nprocPerNode": 4}},
                     "spec.torch.nprocPerNode (4) exceeds spec.accelerator.count (1)", id="more processes than GPUs"),
        pytest.param({"framework": "Jax"}, 'spec.framework: Unsupported value: "Jax"', id="an unknown framework"),
    ],
)  # fmt: skip
def test_an_invalid_spec_gets_an_invalid_condition_and_nothing_else(
    spec_change: dict[str, Any], message: str
) -> None:
    job = {**JOB, "spec": {**JOB["spec"], **spec_change}}
    plan = plan_for(job, [], NOW)
    assert (applied(plan), plan.delete, plan.delete_job) == ([], [], False)
    assert plan.status is not None and plan.status["phase"] == "Invalid"
    invalid = condition(after(job, plan), "Invalid")
    assert invalid is not None and invalid["status"] == "True" and message in invalid["message"]
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "InvalidSpec")]
    again = plan_for(after(job, plan), [], NOW + timedelta(seconds=30))
    assert (again.status, again.events) == (None, [])  # no event storm while it stays invalid


def test_fixing_an_invalid_spec_clears_the_condition_and_creates_the_pods() -> None:
    broken = {**JOB, "spec": {**JOB["spec"], "framework": "Jax"}}
    invalid_job = after(broken, plan_for(broken, [], NOW))
    plan = plan_for({**invalid_job, "spec": JOB["spec"]}, [], NOW + timedelta(seconds=5))
    assert len(applied(plan)) == 4 and plan.status is not None and plan.status["phase"] == "Pending"
    assert Event("Normal", "ValidSpec", "the spec is valid") in plan.events


def test_a_failed_pod_restarts_the_whole_gang_as_the_next_attempt() -> None:
    job, pods = started()
    children = [
        running(pods["mnist-master-0"]),
        exited(pods["mnist-worker-0"], 1),
        running(pods["mnist-worker-1"]),
    ]
    # Its peers still run: the gang is watched for a disruption before a failure is charged.
    settling = plan_for(job, children, NOW + timedelta(minutes=1))
    assert settling.create == settling.delete == [] and settling.requeue_after == 30.0
    assert settling.status is not None and settling.status["brokenSince"] == "2030-01-01T12:01:00Z"
    assert settling.status["phase"] == "Restarting"
    watching = "watching the gang for a disruption for up to 30s before charging a failure"
    assert settling.events == [
        Event("Normal", "Settling", f"pod mnist-worker-0: Error, exit code 1, on node gpu-node-1; {watching}")
    ]
    broken = after(job, settling)
    assert plan_for(broken, children, NOW + timedelta(minutes=1, seconds=29)).status is None  # still watching

    plan = plan_for(broken, children, NOW + timedelta(minutes=1, seconds=30))
    # The restart is recorded first, nothing else: the next pass finds the old pods stale.
    assert deleted(plan) == [] and applied(plan) == ["Service/mnist"] and plan.requeue_after == 0.0
    assert plan.status is not None and "brokenSince" not in plan.status
    assert (plan.status["attempt"], plan.status["restarts"], plan.status["phase"]) == (
        2, {"failures": 1, "preemptions": 0, "total": 1}, "Restarting")  # fmt: skip
    assert plan.status["lastRestart"] == {"reason": "PodFailed", "message": "pod mnist-worker-0: Error, exit code 1, on node gpu-node-1",
                                          "time": "2030-01-01T12:01:30Z",
                                          "failures": [{"reason": "Error", "exitCode": 1, "error": ""}]}  # fmt: skip
    assert plan.events[0] == Event(
        "Warning", "PodFailed", "attempt 2: pod mnist-worker-0: Error, exit code 1, on node gpu-node-1"
    )
    restarting = after(broken, plan)

    teardown = plan_for(restarting, children, NOW + timedelta(minutes=1))
    assert deleted(teardown) == NAMES and applied(teardown) == ["Service/mnist"]
    assert (teardown.status, teardown.events) == (None, [])  # counted once, announced once

    terminating = [deleting(c) for c in children]
    waiting = plan_for(restarting, terminating, NOW + timedelta(minutes=1, seconds=31))
    # Old pods going: no new pod yet, and nothing deleted twice.
    assert applied(waiting) == ["Service/mnist"] and waiting.delete == []

    backing_off = plan_for(restarting, [], NOW + timedelta(minutes=1, seconds=32))
    assert applied(backing_off) == ["Service/mnist"] and backing_off.requeue_after == 3.0

    recreate = plan_for(restarting, [], NOW + timedelta(minutes=1, seconds=36))
    pods2 = recreate.create
    assert [p["metadata"]["labels"]["training.dtjob.io/attempt"] for p in pods2] == ["2", "2", "2"]
    assert {"name": "DTJ_ATTEMPT", "value": "2"} in pods2[0]["spec"]["containers"][0]["env"]
    assert recreate.status is not None and recreate.status["createdAttempt"] == 2


def test_a_second_break_of_the_gang_gets_its_full_settle_window() -> None:
    """brokenSince, set while the first break settled, is gone from the stored status once the restart
    is recorded: the next break starts a window of its own instead of being charged at once."""
    job, pods = started()
    first = [
        running(pods["mnist-master-0"]),
        exited(pods["mnist-worker-0"], 1),
        running(pods["mnist-worker-1"]),
    ]
    broken = after(job, plan_for(job, first, NOW + timedelta(minutes=1)))
    assert broken["status"]["brokenSince"] == "2030-01-01T12:01:00Z"
    restarting = after(broken, plan_for(broken, first, NOW + timedelta(minutes=1, seconds=30)))
    assert restarting["status"]["attempt"] == 2 and "brokenSince" not in restarting["status"]

    recreated = after(restarting, recreate := plan_for(restarting, [], NOW + timedelta(minutes=2)))
    second = {p["metadata"]["name"]: p for p in recreate.create}
    again = [
        running(second["mnist-master-0"]),
        running(second["mnist-worker-0"]),
        exited(second["mnist-worker-1"], 1),
    ]
    watching = plan_for(recreated, again, NOW + timedelta(minutes=5))
    assert watching.status is not None and watching.status["brokenSince"] == "2030-01-01T12:05:00Z"
    assert watching.status["restarts"]["failures"] == 1 and watching.requeue_after == 30.0


def test_a_preemption_restarts_at_once_and_is_counted_apart() -> None:
    job, pods = started()
    children = [
        running(pods["mnist-master-0"]),
        preempted(pods["mnist-worker-0"]),
        running(pods["mnist-worker-1"]),
    ]
    plan = plan_for(job, children, NOW + timedelta(minutes=1))
    assert plan.status is not None and plan.status["restarts"] == {
        "failures": 0,
        "preemptions": 1,
        "total": 1,
    }
    assert plan.requeue_after == 0.0
    recreate = plan_for(after(job, plan), [], NOW + timedelta(minutes=1, seconds=1))
    assert len(recreate.create) == 3


def test_a_second_preemption_before_the_new_gang_ran_is_announced_too() -> None:
    job, pods = started()
    job = after(job, plan_for(job, [preempted(pods["mnist-worker-0"])], NOW))
    job = after(job, plan_for(job, [], NOW))
    second = pods_of(JOB, attempt=2)
    plan = plan_for(job, [preempted(second["mnist-worker-1"])], NOW + timedelta(seconds=5))
    assert (
        plan.status is not None
        and plan.status["attempt"] == 3
        and plan.status["restarts"]["preemptions"] == 2
    )
    assert [e.reason for e in plan.events] == ["Preempted"]


def test_a_failed_preflight_is_a_warning_event_and_its_own_counter_once() -> None:
    preflight_job = {**JOB, "spec": {**JOB["spec"], "nccl": {"preflight": {"enabled": True}}}}
    job, pods = started(preflight_job)
    # A job that already restarted: the preflight's failure must leave those counters as they are.
    job["status"]["restarts"] = {"failures": 1, "preemptions": 2, "total": 3}
    fell_back = preflight_outcome("PreflightFailed", busbw=2.1, transport="Socket")
    children = [preflight_ended(pod, 3, fell_back) for pod in pods.values()]
    plan = plan_for(job, children, NOW + timedelta(seconds=10))
    failed = after(job, plan)
    assert failed["status"]["phase"] == "Failed"
    assert failed["status"]["restarts"] == {
        "failures": 1,
        "preemptions": 2,
        "total": 3,
        "preflightFailures": 1,
    }
    failed_condition = condition(failed, "Failed")
    assert failed_condition is not None
    message = failed_condition["message"]
    assert "PreflightFailed, exit code 3" in message and "transport Socket" in message
    assert [e for e in plan.events if e.reason == "PreflightFailed"] == [
        Event("Warning", "PreflightFailed", message)
    ]

    # The job is finished: later passes neither count nor announce the failure again.
    again = plan_for(failed, children, NOW + timedelta(seconds=20))
    assert after(failed, again)["status"]["restarts"] == failed["status"]["restarts"]
    assert all(e.reason != "PreflightFailed" for e in again.events)


def test_a_pod_that_vanished_from_a_created_attempt_restarts_the_gang_and_is_not_recreated() -> None:
    job, pods = started()
    assert job["status"]["createdAttempt"] == 1
    job["status"]["brokenSince"] = "2030-01-01T11:59:35Z"  # settled
    seen = [running(pods["mnist-master-0"]), running(pods["mnist-worker-1"])]
    # The adapter lists the job's pods before acting on it: a cache that lags must not charge a failure.
    assert needs_for(job, seen, NOW + timedelta(seconds=5), listed=False) == Needs(
        listing=("mnist-worker-0",)
    )
    plan = plan_for(job, seen, NOW + timedelta(seconds=5))
    assert plan.create == []
    assert plan.status is not None and (plan.status["attempt"], plan.status["restarts"]["failures"]) == (2, 1)
    assert plan.status["lastRestart"]["message"].startswith("pod mnist-worker-0: Vanished")
    # With every member seen there is nothing to confirm: decided at once.
    plan_for(job, [running(p) for p in pods.values()], NOW + timedelta(seconds=5), listed=False)


def test_what_the_caches_may_lag_on_is_asked_for_before_a_node_is_judged_gone_or_a_member_lost() -> None:
    job, pods = started()
    job["status"]["brokenSince"] = "2030-01-01T11:59:35Z"  # settled
    on_new_node = running(pods["mnist-worker-1"])
    on_new_node["spec"]["nodeName"] = "gpu-node-2"
    seen = [running(pods["mnist-master-0"]), on_new_node]
    overdue = [pods["mnist-worker-0"]]
    caches = {"nodes": [node()], "overdue": overdue, "from_caches": True, "listed": False}
    # A node the node watch has not delivered and a pod the pod watch has not: asked for, not judged.
    asked = needs_for(job, seen, NOW + timedelta(seconds=5), **caches)
    assert asked == Needs(nodes=("gpu-node-2",), overdue=True)
    # Once read, neither is asked again: the node read is judged, the pod found is a member.
    read = [*seen, running(pods["mnist-worker-0"])]
    calm = plan_for(job, read, NOW + timedelta(seconds=5), [node(), node("gpu-node-2")], overdue=overdue)
    assert after(job, calm)["status"]["attempt"] == 1 and calm.delete == [] and calm.create == []
    # Nothing lagging, nothing asked: the caches are decided on at once.
    plan_for(job, read, NOW + timedelta(seconds=5), [node(), node("gpu-node-2")], from_caches=True)
    # A node still absent after its read is gone: the member on it is lost.
    lost = plan_for(job, read, NOW + timedelta(seconds=5), [node()], overdue=overdue)
    assert after(job, lost)["status"]["attempt"] == 2


def test_pods_an_interrupted_creation_left_missing_are_created_not_counted_as_lost() -> None:
    job = {**JOB, "status": {"attempt": 1, "conditions": []}}  # the pass that created them never recorded it
    plan = plan_for(job, [running(pods_of(JOB)["mnist-master-0"])], NOW)
    assert applied(plan) == ["Service/mnist", "Pod/mnist-worker-0", "Pod/mnist-worker-1"]
    assert (
        plan.status is not None
        and plan.status["createdAttempt"] == 1
        and plan.status["restarts"]["total"] == 0
    )


def test_an_operator_stopped_mid_restart_finishes_it_without_counting_it_again() -> None:
    # Attempt 2 is recorded; the old pods were not deleted yet when the operator stopped.
    job, pods = started()
    children = [
        running(pods["mnist-master-0"]),
        exited(pods["mnist-worker-0"], 1),
        running(pods["mnist-worker-1"]),
    ]
    job["status"]["brokenSince"] = "2030-01-01T11:59:30Z"  # settled
    restarting = after(job, plan_for(job, children, NOW))
    again = plan_for(restarting, children, NOW + timedelta(minutes=5))
    assert deleted(again) == NAMES and again.create == []
    assert again.status is None and again.events == []


def test_a_pod_stuck_terminating_on_a_deleted_node_is_force_deleted_after_its_grace() -> None:
    job, pods = started()
    job = {**job, "status": {**job["status"], "attempt": 2}}
    old = deleted_at(running(pods["mnist-worker-0"]), "2030-01-01T12:00:30Z")
    early = plan_for(job, [old], NOW, nodes=[])
    assert early.delete == [] and early.requeue_after == 30.0
    late = plan_for(job, [old], NOW + timedelta(seconds=30), nodes=[])
    assert late.delete == [Delete("Pod", "mnist-worker-0", old["metadata"]["uid"], grace_period_seconds=0)]
    assert Event("Warning", "ForceDeleted",
                 "pod mnist-worker-0 was still terminating past its grace period on lost node gpu-node-1") in late.events  # fmt: skip
    # A pod terminating slowly on a healthy node is left to its kubelet.
    assert plan_for(job, [old], NOW + timedelta(minutes=5), nodes=[node()]).delete == []


def test_suspending_ends_the_attempt_so_the_resumed_gang_waits_for_the_old_pods() -> None:
    job, pods = started()
    suspended_job = {**job, "spec": {**job["spec"], "runPolicy": {"suspend": True}}}
    suspended_job = after(suspended_job, plan_for(suspended_job, [running(p) for p in pods.values()], NOW))
    assert suspended_job["status"]["attempt"] == 2 and suspended_job["status"]["restarts"]["total"] == 0
    resumed_job = {**suspended_job, "spec": JOB["spec"]}
    still_going = [deleting(running(p)) for p in pods.values()]
    plan = plan_for(resumed_job, still_going, NOW + timedelta(seconds=5))
    assert applied(plan) == ["Service/mnist"] and plan.delete == []
    assert plan.status is not None and plan.status["restarts"]["total"] == 0


def test_suspending_ends_the_attempt_even_when_its_creation_was_never_recorded() -> None:
    # A leader taken away between creating the pods and writing the status leaves no createdAttempt; a
    # suspension seen first by its successor still ends attempt 1 (CI flake: the gang resumed as attempt 1).
    job = {
        **JOB,
        "spec": {**JOB["spec"], "runPolicy": {"suspend": True}},
        "status": {"attempt": 1, "conditions": []},
    }
    plan = plan_for(job, [running(p) for p in pods_of(JOB).values()], NOW)
    assert plan.status is not None and plan.status["attempt"] == 2 and deleted(plan) == NAMES
    # A job suspended before any pod of it existed has no attempt to end.
    never_started = plan_for({**job, "status": {"attempt": 1, "conditions": []}}, [], NOW)
    assert never_started.status is not None and never_started.status["attempt"] == 1


def test_pods_of_another_attempt_are_deleted_and_never_reapplied() -> None:
    job = {**JOB, "status": {"attempt": 2, "conditions": []}}
    stale = [running(p) for p in pods_of(JOB, attempt=1).values()]
    plan = plan_for(job, stale, NOW)
    assert deleted(plan) == NAMES and applied(plan) == ["Service/mnist"]
    assert all(
        isinstance(d, Delete) and d.kind == "Pod" and d.grace_period_seconds is None for d in plan.delete
    )


def test_the_user_container_env_reaches_the_applied_pods() -> None:
    job = manifest(
        {"role": "Worker", "count": 1, "template": template(container(env=[{"name": "LR", "value": "0.1"}]))}
    )
    plan = plan_for(job, [], NOW)
    assert plan.create[0]["spec"]["containers"][0]["env"][-1] == {"name": "LR", "value": "0.1"}


def test_live_pods_are_never_rewritten_only_missing_ones_are_created() -> None:
    job = {**JOB, "status": {"attempt": 1, "conditions": []}}
    pods = pods_of(JOB)
    plan = plan_for(job, [service_of(JOB), running(pods["mnist-master-0"])], NOW)
    assert applied(plan) == ["Pod/mnist-worker-0", "Pod/mnist-worker-1"] and plan.relabel == []


def test_a_changed_render_leaves_running_pods_alone_and_the_next_attempt_gets_it() -> None:
    """An operator upgrade that renders pods differently (a new env var) must not touch live pods."""
    job, pods = started()
    children = [service_of(JOB), *(running(p) for p in pods.values())]
    job = after(job, plan_for(job, children, NOW))
    upgraded = {**job, "spec": {**job["spec"], "replicas": [
        {**r, "template": template(container(env=[{"name": "NEW", "value": "1"}]))} for r in job["spec"]["replicas"]]}}  # fmt: skip
    plan = plan_for(upgraded, children, NOW + timedelta(seconds=30))
    assert (applied(plan), plan.relabel, plan.delete) == ([], [], [])


def test_drifted_labels_and_annotations_of_a_live_pod_are_patched_back_and_nothing_else() -> None:
    job, pods = started()
    edited = running(pods["mnist-worker-0"])
    edited["metadata"]["labels"]["training.dtjob.io/role"] = "Chief"
    edited["metadata"]["labels"]["team"] = "theirs"  # not ours: left alone
    children = [service_of(JOB), running(pods["mnist-master-0"]), edited, running(pods["mnist-worker-1"])]
    plan = plan_for(job, children, NOW)
    assert plan.relabel == [
        Relabel("mnist-worker-0", edited["metadata"]["uid"], {"training.dtjob.io/role": "Worker"}, {})
    ]
    assert applied(plan) == []


def test_an_edited_service_is_applied_again_and_a_matching_one_is_not() -> None:
    job, pods = started()
    live = [running(p) for p in pods.values()]
    edited = service_of(JOB)
    edited["spec"]["publishNotReadyAddresses"] = False
    assert applied(plan_for(job, [edited, *live], NOW)) == ["Service/mnist"]
    defaulted = service_of(JOB)  # what the apiserver adds (a uid, defaults) does not count as drift
    defaulted["metadata"]["uid"] = "svc-uid"
    defaulted["spec"]["sessionAffinity"] = "None"
    defaulted["spec"]["ports"][0]["appProtocol"] = "tcp"
    assert applied(plan_for(job, [defaulted, *live], NOW)) == []


def test_a_status_with_an_unknown_condition_keeps_the_attempt_and_deletes_no_pod() -> None:
    """A rollback: the stored status was written by a newer operator version."""
    job, pods = started()
    children = [service_of(JOB), *(running(p) for p in pods.values())]
    job = after(job, plan_for(job, children, NOW))
    newer = {**job, "status": {**job["status"], "phase": "Draining", "conditions": [
        *job["status"]["conditions"],
        {"type": "Degraded", "status": "True", "reason": "Newer", "lastTransitionTime": "2030-01-01T12:00:00Z"}]}}  # fmt: skip
    plan = plan_for(newer, children, NOW + timedelta(seconds=30))
    assert (plan.delete, applied(plan)) == ([], [])
    assert plan.status is not None and plan.status["attempt"] == 1 and plan.status["phase"] == "Running"


def test_pods_created_by_a_pass_whose_status_write_was_refused_are_recorded_with_the_start_time() -> None:
    """The status patch carries the job's resourceVersion: a pass can create the pods and then find its
    status refused (the job changed meanwhile). The next pass sees every pod and records the creation."""
    plan = plan_for(JOB, [service_of(JOB), *pods_of(JOB).values()], NOW)
    assert applied(plan) == [] and plan.status is not None
    assert (plan.status["createdAttempt"], plan.status["startTime"]) == (1, "2030-01-01T12:00:00Z")
    assert Event("Normal", "Created", "created the pods of attempt 1") in plan.events


def test_a_spec_whose_pods_the_apiserver_refused_is_invalid_until_it_changes() -> None:
    refusal = "pod mnist-worker-0: 422 Pod is invalid: spec.containers[0].env[0].valueFrom: Invalid value"
    refused = refused_pods(JOB, refusal, NOW)
    assert refused.create == [] and refused.status is not None and refused.status["phase"] == "Invalid"
    invalid = next(c for c in refused.status["conditions"] if c["type"] == "Invalid")
    assert (invalid["reason"], invalid["observedGeneration"]) == ("PodRefused", 1)
    assert refusal in invalid["message"] and "spec.runPolicy.suspend: true" in invalid["message"]
    assert refused.events == [Event("Warning", "PodRefused", invalid["message"])]

    job = after(JOB, refused)
    created_first = running(pods_of(JOB)["mnist-master-0"])  # created before the refusal
    again = plan_for(job, [created_first], NOW + timedelta(seconds=5))
    # Same spec: nothing created again, nothing said again; the gang's first pod cannot form a gang.
    assert again.create == [] and again.status is None and again.events == []
    assert again.delete == [Delete("Pod", "mnist-master-0", created_first["metadata"]["uid"])]

    edited = {**job, "metadata": {**job["metadata"], "generation": 2}}
    fixed = plan_for(edited, [], NOW + timedelta(seconds=10))
    assert applied(fixed) == ["Service/mnist", *(f"Pod/{n}" for n in NAMES)]
    assert fixed.status is not None and fixed.status["phase"] == "Pending"
    assert Event("Normal", "ValidSpec", "the spec is valid") in fixed.events


# spec.networkPolicy: the gang's NetworkPolicy is applied as the Service is, and deleted when turned off.
ISOLATED = {**JOB, "spec": {**JOB["spec"], "networkPolicy": {"enabled": True}}}


def policy_of(job: dict[str, Any]) -> dict[str, Any]:
    """The job's NetworkPolicy as the apiserver stores it: the render plus what the server adds."""
    policy = next(c for c in render_children(job, 1) if c["kind"] == "NetworkPolicy")
    policy["metadata"] |= {"uid": "uid-policy", "resourceVersion": "7", "generation": 1,
                           "creationTimestamp": "2030-01-01T11:59:00Z"}  # fmt: skip
    return policy


def test_an_enabled_network_policy_is_applied_with_the_service_before_any_pod_is_created() -> None:
    plan = plan_for(ISOLATED, [], NOW)
    assert applied(plan) == ["Service/mnist", "NetworkPolicy/mnist", *(f"Pod/{n}" for n in NAMES)]
    assert plan.apply[1]["spec"]["podSelector"] == {"matchLabels": {"training.dtjob.io/job-name": "mnist"}}


def test_a_matching_network_policy_is_not_applied_again_a_missing_or_edited_one_is() -> None:
    job, pods = started(ISOLATED)
    live = [running(p) for p in pods.values()]
    assert applied(plan_for(job, [service_of(ISOLATED), policy_of(ISOLATED), *live], NOW)) == []
    # Missing (deleted by hand, or enabled on a running job): applied again; the pods are left alone.
    assert applied(plan_for(job, [service_of(ISOLATED), *live], NOW)) == ["NetworkPolicy/mnist"]
    opened = policy_of(ISOLATED)
    opened["spec"]["ingress"] = [{}]  # edited to admit everyone
    plan = plan_for(job, [service_of(ISOLATED), opened, *live], NOW)
    assert applied(plan) == ["NetworkPolicy/mnist"] and plan.delete == []
    assert plan.apply[0]["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"training.dtjob.io/job-name": "mnist"}}}]}
    ]


def test_without_spec_network_policy_no_policy_is_rendered_or_applied() -> None:
    assert not [c for c in render_children(JOB, 1) if c["kind"] == "NetworkPolicy"]
    assert "NetworkPolicy/mnist" not in applied(plan_for(JOB, [], NOW))
    off = {**JOB, "spec": {**JOB["spec"], "networkPolicy": {"enabled": False}}}
    assert "NetworkPolicy/mnist" not in applied(plan_for(off, [], NOW))


def test_turning_the_network_policy_off_deletes_it_once() -> None:
    job, pods = started(ISOLATED)
    off = {**job, "spec": {**job["spec"], "networkPolicy": {"enabled": False}}}
    live = [running(p) for p in pods.values()]
    plan = plan_for(off, [service_of(JOB), policy_of(ISOLATED), *live], NOW)
    assert plan.delete == [Delete("NetworkPolicy", "mnist", "uid-policy")] and applied(plan) == []
    going = policy_of(ISOLATED)
    going["metadata"]["deletionTimestamp"] = "2030-01-01T12:00:00Z"
    assert plan_for(off, [service_of(JOB), going, *live], NOW).delete == []


def test_the_network_policy_stays_through_a_suspension_and_after_the_job_finished() -> None:
    job, pods = started(ISOLATED)
    policy = policy_of(ISOLATED)
    children = [service_of(ISOLATED), policy, *(running(p) for p in pods.values())]
    suspended = {**job, "spec": {**job["spec"], "runPolicy": {"suspend": True}}}
    plan = plan_for(suspended, children, NOW + timedelta(minutes=1))
    assert deleted(plan) == NAMES and applied(plan) == []
    # Finished, its pods kept (cleanPodPolicy None): they stay isolated until the job is deleted.
    kept = {**job, "spec": {**job["spec"], "runPolicy": {"cleanPodPolicy": "None"}}}
    done = [service_of(ISOLATED), policy, exited(pods["mnist-master-0"], 0), *children[3:]]
    plan = plan_for(kept, done, NOW + timedelta(minutes=5))
    assert plan.status is not None and plan.status["phase"] == "Succeeded"
    assert (applied(plan), plan.delete) == ([], [])
