"""Elastic PyTorch (spec.torch.elastic), in whole passes: torchrun's rendezvous variables, a lost member
replaced while the rest trains on, and the cases that still restart the gang."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from dtjob.core.plan import Plan
from dtjob.core.status.codec import status_patch
from tests.support.builders import (
    NOW,
    SHARED_CHECKPOINTS,
    deleting,
    disrupted_while_running,
    exited,
    manifest,
    pods_of,
    preempted,
    running,
)
from tests.support.plan import after, deleted, needs_for, plan_for

NAMES = ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2"]


def elastic_job(min_replicas: int = 2, **elastic: Any) -> dict[str, Any]:
    job = manifest(("Worker", 3), checkpoint=SHARED_CHECKPOINTS)
    job["spec"]["torch"] = {"elastic": {"minReplicas": min_replicas, **elastic}}
    return job


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}


def running_gang(job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The job after its pods were created and seen running, and those pods."""
    job = after(job, plan_for(job, [], NOW))
    pods = pods_of(job)
    job = after(job, plan_for(job, [running(p) for p in pods.values()], NOW))
    return job, pods


def with_new_uid(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["uid"] += "-replacement"
    return pod


def counters(plan: Plan) -> dict[str, int]:
    assert plan.status is not None
    return dict(plan.status["restarts"])


def test_the_pods_get_torchruns_c10d_rendezvous_and_no_fixed_rank() -> None:
    pods = pods_of(elastic_job(2, maxReplicas=5, maxRestarts=4))
    envs = {name: env_of(pod) for name, pod in pods.items()}
    host = "mnist-worker-0.mnist.team-a.svc:29500"
    for name, env in envs.items():
        assert env["PET_NNODES"] == "2:5" and env["PET_MAX_RESTARTS"] == "4"
        assert (env["PET_RDZV_BACKEND"], env["PET_RDZV_ENDPOINT"], env["PET_RDZV_ID"]) == (
            "c10d",
            host,
            "mnist-1",
        )
        # Worker 0's torchrun hosts the rendezvous: said outright, not guessed from DNS.
        assert env["PET_RDZV_CONF"].startswith(f"is_host={int(name == 'mnist-worker-0')},")
        assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
        assert not {"RANK", "WORLD_SIZE", "PET_NODE_RANK", "MASTER_ADDR"} & set(env), env
    # Each attempt meets in a rendezvous of its own.
    assert env_of(pods_of(elastic_job(), attempt=2)["mnist-worker-1"])["PET_RDZV_ID"] == "mnist-2"


def test_a_preempted_worker_is_replaced_alone_while_the_others_train_on() -> None:
    job, pods = running_gang(elastic_job())
    assert job["status"]["elastic"] == {"minReplicas": 2, "maxReplicas": 3}
    lost = preempted(pods["mnist-worker-2"])
    survivors = [running(pods["mnist-worker-0"]), running(pods["mnist-worker-1"])]
    plan = plan_for(job, [*survivors, lost], NOW + timedelta(seconds=5))
    # No gang restart: the same attempt, the survivors untouched; the ended pod goes (its name is taken).
    assert plan.status is not None and plan.status["attempt"] == 1
    assert counters(plan) == {"failures": 0, "preemptions": 0, "total": 0, "replacements": 1}
    assert deleted(plan) == ["mnist-worker-2"] and plan.create == []
    [replaced] = plan.status["elastic"]["replaced"]
    assert (replaced["pod"], replaced["uid"], replaced["reason"]) == (
        "mnist-worker-2",
        lost["metadata"]["uid"],
        "Preempted",
    )
    [event] = [e for e in plan.events if e.reason == "MemberReplaced"]
    assert event.type == "Warning" and event.message.startswith(
        "attempt 1: pod mnist-worker-2: TerminationByKubelet"
    )
    assert "the other 2 members train on (spec.torch.elastic: at least 2)" in event.message
    assert not [e for e in plan.events if e.reason == "Preempted"]
    job = after(job, plan)

    # Seen again before it is gone: nothing more is counted or said.
    again = plan_for(job, [*survivors, lost], NOW + timedelta(seconds=6))
    assert again.status is None and again.events == [] and again.create == []

    # Gone: its pod is created again, in the same attempt, and nothing more is counted.
    # The adapter confirms it gone (a fresh listing) before acting.
    assert needs_for(job, survivors, NOW + timedelta(seconds=10), listed=False).listing == ("mnist-worker-2",)
    gone = plan_for(job, survivors, NOW + timedelta(seconds=10))
    assert [p["metadata"]["name"] for p in gone.create] == ["mnist-worker-2"]
    assert gone.create[0]["metadata"]["labels"]["training.dtjob.io/attempt"] == "1"
    assert gone.status is None or counters(gone)["replacements"] == 1
    job = after(job, gone)

    # The new pod runs: the gang is whole; a later preemption of it is a replacement of its own.
    replacement = with_new_uid(pods["mnist-worker-2"])
    whole = plan_for(job, [*survivors, running(replacement)], NOW + timedelta(seconds=20))
    job = after(job, whole)
    assert job["status"]["replicasReady"] == "3/3"
    second = plan_for(job, [*survivors, preempted(replacement)], NOW + timedelta(seconds=30))
    assert counters(second)["replacements"] == 2 and second.status is not None
    assert [r["uid"] for r in second.status["elastic"]["replaced"]] == [replacement["metadata"]["uid"]]


def test_an_evicted_worker_still_terminating_is_counted_once_and_not_deleted_again() -> None:
    job, pods = running_gang(elastic_job())
    evicted = disrupted_while_running(pods["mnist-worker-1"], "EvictionByEvictionAPI")
    evicted["metadata"]["deletionTimestamp"] = "2030-01-01T12:00:30Z"
    survivors = [running(pods["mnist-worker-0"]), running(pods["mnist-worker-2"])]
    first = plan_for(job, [*survivors, evicted], NOW + timedelta(seconds=5))
    assert counters(first)["replacements"] == 1 and deleted(first) == [] and first.create == []
    second = plan_for(after(job, first), [*survivors, evicted], NOW + timedelta(seconds=8))
    assert second.status is None and deleted(second) == [] and second.create == []


def test_losing_the_rendezvous_host_a_failure_or_too_many_members_restarts_the_gang() -> None:
    job, pods = running_gang(elastic_job())
    others = {name: running(pod) for name, pod in pods.items()}
    host_lost = plan_for(job, [*others.values(), preempted(pods["mnist-worker-0"])][1:], NOW)
    assert host_lost.status is not None and host_lost.status["attempt"] == 2
    assert counters(host_lost) == {"failures": 0, "preemptions": 1, "total": 1}

    # A member that failed: its torchrun gave up after its own restarts. The usual path, settle window first.
    failed = exited(pods["mnist-worker-1"], 1, message="RuntimeError: boom")
    settling = plan_for(job, [others["mnist-worker-0"], failed, others["mnist-worker-2"]], NOW)
    assert settling.status is not None and settling.status["attempt"] == 1
    assert "replacements" not in settling.status["restarts"]
    assert settling.status["phase"] == "Restarting"

    strict, pods = running_gang(elastic_job(min_replicas=3))
    below = plan_for(
        strict,
        [running(pods["mnist-worker-0"]), running(pods["mnist-worker-1"]), preempted(pods["mnist-worker-2"])],
        NOW,
    )
    assert below.status is not None and below.status["attempt"] == 2 and counters(below)["preemptions"] == 1


def test_a_gang_restart_starts_the_next_attempt_with_no_replacement_recorded() -> None:
    job, pods = running_gang(elastic_job())
    survivors = [running(pods["mnist-worker-0"]), running(pods["mnist-worker-1"])]
    job = after(job, plan_for(job, [*survivors, preempted(pods["mnist-worker-2"])], NOW))
    assert len(job["status"]["elastic"]["replaced"]) == 1
    restart = plan_for(job, [preempted(pods["mnist-worker-0"]), survivors[1]], NOW + timedelta(seconds=5))
    job = after(job, restart)
    assert job["status"]["attempt"] == 2 and job["status"]["elastic"] == {"minReplicas": 2, "maxReplicas": 3}
    assert job["status"]["restarts"]["replacements"] == 1  # the count of the job's whole life stays


def test_a_fixed_gang_carries_no_elastic_status() -> None:
    job, _ = running_gang(manifest(("Worker", 2), checkpoint=SHARED_CHECKPOINTS))
    assert "elastic" not in job["status"]


def test_a_worker_that_says_it_was_stopped_and_saved_is_replaced_too() -> None:
    job, pods = running_gang(elastic_job())
    saved = exited(
        pods["mnist-worker-1"], 200, message='{"reason": "PreemptedCheckpointSaved", "message": "x"}'
    )
    plan = plan_for(job, [running(pods["mnist-worker-0"]), saved, running(pods["mnist-worker-2"])], NOW)
    assert counters(plan)["replacements"] == 1 and deleted(plan) == ["mnist-worker-1"]


def test_a_worker_deleted_by_hand_is_replaced_as_a_lost_member() -> None:
    job, pods = running_gang(elastic_job())
    being_deleted = deleting(running(pods["mnist-worker-2"]))
    plan = plan_for(
        job, [running(pods["mnist-worker-0"]), running(pods["mnist-worker-1"]), being_deleted], NOW
    )
    assert plan.status is not None and plan.status["attempt"] == 1
    assert [r["reason"] for r in plan.status["elastic"]["replaced"]] == ["Lost"]
    assert deleted(plan) == []  # being deleted already


def test_an_operator_stopped_after_deleting_a_lost_member_counts_it_once_when_it_comes_back() -> None:
    """The pass deleted the preempted pod, then the operator stopped before its status write: the next
    operator finds the member gone with no record of it (no uid), counts it once and creates its pod."""
    job, pods = running_gang(elastic_job())
    survivors = [running(pods["mnist-worker-0"]), running(pods["mnist-worker-1"])]
    lost = plan_for(job, [*survivors, preempted(pods["mnist-worker-2"])], NOW)
    assert deleted(lost) == ["mnist-worker-2"]  # its status write never lands
    resumed = plan_for(job, survivors, NOW + timedelta(seconds=5))
    assert counters(resumed)["replacements"] == 1 and resumed.status is not None
    assert [p["metadata"]["name"] for p in resumed.create] == ["mnist-worker-2"]
    assert [(r["pod"], r["uid"], r["reason"]) for r in resumed.status["elastic"]["replaced"]] == [
        ("mnist-worker-2", "", "Lost")
    ]
    again = plan_for(after(job, resumed), survivors, NOW + timedelta(seconds=6))  # its pod not seen yet
    assert again.status is None and [p["metadata"]["name"] for p in again.create] == ["mnist-worker-2"]


def test_a_job_made_fixed_while_suspended_loses_its_elastic_status_on_the_server() -> None:
    """A merge patch keeps what it omits: the status write must clear status.elastic, not leave it."""
    job, pods = running_gang(elastic_job())
    job = after(job, plan_for(job, [running(pods["mnist-worker-0"]), running(pods["mnist-worker-1"]),
                                     preempted(pods["mnist-worker-2"])], NOW))  # fmt: skip
    assert job["status"]["elastic"]["replaced"]
    fixed = {**job, "spec": {**job["spec"], "torch": {}, "runPolicy": {"suspend": True}}}
    plan = plan_for(fixed, [], NOW + timedelta(seconds=5))
    assert plan.status is not None and "elastic" not in plan.status
    assert status_patch(job["status"], plan.status)["elastic"] is None
    assert "elastic" not in after(fixed, plan)["status"]
