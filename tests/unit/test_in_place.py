"""runPolicy.restartStrategy InPlace in whole passes: which pods a restart keeps, when they move to the
next attempt, and when the whole gang is recreated after all."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dtjob.core.names import ATTEMPT_LABEL
from dtjob.core.plan import Relabel
from dtjob.core.render import ATTEMPT_FILE, ATTEMPT_VOLUME
from tests.support.builders import (
    NOW,
    SHUTTING_DOWN,
    deleting,
    disrupted_while_running,
    exited,
    node,
    pods_of,
    preempted,
    running,
)
from tests.support.plan import JOB, NAMES, after, applied, deleted, plan_for

IN_PLACE = {**JOB, "spec": {**JOB["spec"], "runPolicy": {"restartStrategy": "InPlace"}}}


def restarted(children: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    """IN_PLACE after the pass that recorded attempt 2 for `children` (attempt 1's pods)."""
    job = after(IN_PLACE, plan_for(IN_PLACE, [], NOW))
    job["status"].update(status)
    return after(job, plan_for(job, children, NOW + timedelta(seconds=1)))


def moved_to(attempt: int, pod: dict[str, Any]) -> Relabel:
    return Relabel(pod["metadata"]["name"], pod["metadata"]["uid"], {ATTEMPT_LABEL: str(attempt)}, {})


def test_a_preempted_member_is_replaced_and_the_running_members_move_to_the_next_attempt() -> None:
    pods = pods_of(IN_PLACE)
    master, evicted, kept = pods["mnist-master-0"], pods["mnist-worker-0"], pods["mnist-worker-1"]
    children = [running(master), preempted(evicted), running(kept)]
    job = restarted(children)
    assert (job["status"]["attempt"], job["status"]["restarts"]["preemptions"]) == (2, 1)
    assert job["status"]["lastRestart"]["inPlace"] is True

    # The preempted pod goes; the running ones stay, and nothing starts before the lost pod is gone.
    teardown = plan_for(job, children, NOW + timedelta(seconds=2))
    assert deleted(teardown) == ["mnist-worker-0"]
    assert teardown.create == [] and teardown.relabel == []
    going = [running(master), deleting(preempted(evicted)), running(kept)]
    assert plan_for(job, going, NOW + timedelta(seconds=3)).relabel == []

    # Gone: the survivors are relabelled (their trainers see the attempt change), one pod is created.
    resume = plan_for(job, [running(master), running(kept)], NOW + timedelta(seconds=4))
    assert resume.delete == [] and applied(resume) == ["Service/mnist", "Pod/mnist-worker-0"]
    assert resume.relabel == [moved_to(2, master), moved_to(2, kept)]
    assert resume.create[0]["metadata"]["labels"][ATTEMPT_LABEL] == "2"
    assert resume.status is not None and resume.status["createdAttempt"] == 2
    resumed = after(job, resume)
    created = next(c for c in resumed["status"]["conditions"] if c["type"] == "Created")
    assert (
        created["message"]
        == "created the pods of attempt 2; mnist-master-0, mnist-worker-1 train on in place"
    )

    # The next pass sees attempt 2 whole: nothing more to write to the pods.
    attempt2 = pods_of(IN_PLACE, attempt=2)
    whole = [running(attempt2[name]) for name in NAMES]
    settled = plan_for(resumed, whole, NOW + timedelta(seconds=5))
    assert settled.create == settled.delete == settled.relabel == []
    assert after(resumed, settled)["status"]["phase"] == "Running"


def test_the_pods_of_an_in_place_job_read_their_attempt_from_a_file_the_kubelet_keeps() -> None:
    pod = pods_of(IN_PLACE)["mnist-worker-0"]
    trainer = pod["spec"]["containers"][0]
    assert {"name": "DTJ_ATTEMPT_FILE", "value": ATTEMPT_FILE} in trainer["env"]
    assert ATTEMPT_VOLUME in pod["spec"]["volumes"]
    assert {"name": "dtj-attempt", "mountPath": "/etc/dtjob/attempt"} in trainer["volumeMounts"]
    recreated = pods_of(JOB)["mnist-worker-0"]
    assert all(v["name"] != "dtj-attempt" for v in recreated["spec"].get("volumes") or [])


def test_after_a_failure_the_survivors_move_on_only_once_the_backoff_is_over() -> None:
    pods = pods_of(IN_PLACE)
    master, crashed, kept = pods["mnist-master-0"], pods["mnist-worker-0"], pods["mnist-worker-1"]
    children = [running(master), exited(crashed, 1), running(kept)]
    job = restarted(children, brokenSince="2030-01-01T11:59:00Z")  # the settle window is over
    assert job["status"]["lastRestart"]["inPlace"] is True
    assert job["status"]["restarts"]["failures"] == 1
    assert deleted(plan_for(job, children, NOW + timedelta(seconds=2))) == ["mnist-worker-0"]
    survivors = [running(master), running(kept)]
    waiting = plan_for(job, survivors, NOW + timedelta(seconds=3))
    assert waiting.create == waiting.relabel == waiting.delete == [] and waiting.requeue_after == 3.0
    resume = plan_for(job, survivors, NOW + timedelta(seconds=6))
    assert [p["metadata"]["name"] for p in resume.create] == ["mnist-worker-0"]
    assert resume.relabel == [moved_to(2, master), moved_to(2, kept)]


def test_a_member_that_ends_while_it_waits_is_replaced_too() -> None:
    pods = pods_of(IN_PLACE)
    master, evicted, kept = pods["mnist-master-0"], pods["mnist-worker-0"], pods["mnist-worker-1"]
    job = restarted([running(master), preempted(evicted), running(kept)])
    plan = plan_for(job, [running(master), exited(kept, 1)], NOW + timedelta(seconds=2))
    assert deleted(plan) == ["mnist-worker-1"] and plan.create == plan.relabel == []
    plan = plan_for(job, [running(master)], NOW + timedelta(seconds=3))
    assert [p["metadata"]["name"] for p in plan.create] == ["mnist-worker-0", "mnist-worker-1"]
    assert plan.relabel == [moved_to(2, master)]
    # A member being taken away meanwhile is not kept either.
    going = disrupted_while_running(kept, "EvictionByEvictionAPI")
    assert deleted(plan_for(job, [running(master), going], NOW + timedelta(seconds=3))) == ["mnist-worker-1"]


def test_a_lost_node_recreates_the_whole_gang() -> None:
    """Its pod's processes may still hold a collective open (no one closed their sockets): the peers
    may wait in it until the collective's timeout, so they are not kept."""
    pods = pods_of(IN_PLACE)
    children = [
        running(pods["mnist-master-0"]),
        running(pods["mnist-worker-0"]),
        running(pods["mnist-worker-1"]),
    ]
    lost = node(ready=False, since="2030-01-01T11:58:00Z")
    job = after(IN_PLACE, plan_for(IN_PLACE, [], NOW))
    plan = plan_for(job, children, NOW + timedelta(seconds=1), nodes=[lost])
    restarting = after(job, plan)
    assert restarting["status"]["attempt"] == 2 and "inPlace" not in restarting["status"]["lastRestart"]
    assert sorted(deleted(plan_for(restarting, children, NOW + timedelta(seconds=2), nodes=[lost]))) == NAMES


def test_a_member_whose_node_stops_reporting_makes_the_restart_recreate_the_gang() -> None:
    """Under a Spot VM that vanished, its peers crash first and its pod still runs on a node not Ready:
    a preemption (docs: the settle window), but the survivors may wait on its sockets, so none is kept."""
    pods = pods_of(IN_PLACE)
    silent = running(pods["mnist-master-0"])
    silent["spec"]["nodeName"] = "gpu-node-2"
    children = [silent, exited(pods["mnist-worker-0"], 1), running(pods["mnist-worker-1"])]
    nodes = [node(), node("gpu-node-2", ready="Unknown", since="2030-01-01T12:00:00Z")]
    job = after(IN_PLACE, plan_for(IN_PLACE, [], NOW))
    restarting = after(job, plan_for(job, children, NOW + timedelta(seconds=1), nodes=nodes))
    assert restarting["status"]["restarts"]["preemptions"] == 1
    assert "inPlace" not in restarting["status"]["lastRestart"]
    assert sorted(deleted(plan_for(restarting, children, NOW + timedelta(seconds=2), nodes=nodes))) == NAMES


def test_a_member_whose_node_shuts_down_is_replaced_in_place_from_the_notice_on() -> None:
    """GKE's Spot VM reclaim: the kubelet's graceful node shutdown says so in the node's Ready condition
    before it stops the pods; the member there is a preemption at once and its peers are kept (their
    collective ends when its trainer exits on SIGTERM)."""
    pods = pods_of(IN_PLACE)
    reclaimed = running(pods["mnist-master-0"])
    reclaimed["spec"]["nodeName"] = "gpu-node-2"
    children = [reclaimed, running(pods["mnist-worker-0"]), running(pods["mnist-worker-1"])]
    nodes = [node(), node("gpu-node-2", ready="False", since="2030-01-01T12:00:00Z", message=SHUTTING_DOWN)]
    job = after(IN_PLACE, plan_for(IN_PLACE, [], NOW))
    restarting = after(job, plan_for(job, children, NOW + timedelta(seconds=1), nodes=nodes))
    assert restarting["status"]["restarts"]["preemptions"] == 1
    assert restarting["status"]["lastRestart"]["reason"] == "Preempted"
    assert restarting["status"]["lastRestart"]["inPlace"] is True
    assert deleted(plan_for(restarting, children, NOW + timedelta(seconds=2), nodes=nodes)) == [
        "mnist-master-0"
    ]


def test_a_suspension_during_an_in_place_restart_takes_the_kept_pods_too() -> None:
    pods = pods_of(IN_PLACE)
    master, evicted, kept = pods["mnist-master-0"], pods["mnist-worker-0"], pods["mnist-worker-1"]
    job = restarted([running(master), preempted(evicted), running(kept)])
    suspended = {**job, "spec": {**job["spec"], "runPolicy": {"restartStrategy": "InPlace", "suspend": True}}}
    plan = plan_for(suspended, [running(master), running(kept)], NOW + timedelta(seconds=2))
    assert deleted(plan) == ["mnist-master-0", "mnist-worker-1"] and plan.relabel == []


def test_a_crash_under_in_place_is_charged_after_the_settle_window_as_the_survivors_wait_running() -> None:
    """Under Recreate the survivors of a crash exit too (their collective broke) and the failure is
    charged at once; kept alive for the next attempt, they make the gang wait out failureSettleSeconds."""
    pods = pods_of(IN_PLACE)
    children = [
        running(pods["mnist-master-0"]),
        exited(pods["mnist-worker-0"], 1),
        running(pods["mnist-worker-1"]),
    ]
    job = after(IN_PLACE, plan_for(IN_PLACE, [], NOW))
    settling = plan_for(job, children, NOW + timedelta(seconds=1))
    assert settling.requeue_after == 30.0 and settling.status is not None
    assert settling.status["phase"] == "Restarting" and settling.status["restarts"]["total"] == 0


def test_a_later_restart_that_recreates_clears_in_place_from_the_stored_status() -> None:
    pods = pods_of(IN_PLACE)
    master, evicted, kept = pods["mnist-master-0"], pods["mnist-worker-0"], pods["mnist-worker-1"]
    job = restarted([running(master), preempted(evicted), running(kept)])
    job = after(job, plan_for(job, [running(master), running(kept)], NOW + timedelta(seconds=2)))
    attempt2 = pods_of(IN_PLACE, attempt=2)
    whole = [running(attempt2[name]) for name in NAMES]
    job = after(job, plan_for(job, whole, NOW + timedelta(seconds=3)))
    lost = node(ready="False", since="2030-01-01T11:58:00Z")  # every pod's node, silent
    job = after(job, plan_for(job, whole, NOW + timedelta(seconds=4), nodes=[lost]))
    assert job["status"]["attempt"] == 3 and "inPlace" not in job["status"]["lastRestart"]


def _kept_one_that_ends(finished: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Attempt 2 of an in-place restart, created at NOW + 4 s with worker 1 kept, which then exits 0 at
    `finished`: the job and what a later pass sees."""
    pods = pods_of(IN_PLACE)
    master, evicted, kept = pods["mnist-master-0"], pods["mnist-worker-0"], pods["mnist-worker-1"]
    job = restarted([running(master), preempted(evicted), running(kept)])
    job = after(job, plan_for(job, [running(master), running(kept)], NOW + timedelta(seconds=4)))
    attempt2 = pods_of(IN_PLACE, attempt=2)
    attempt2["mnist-worker-0"]["metadata"]["creationTimestamp"] = "2030-01-01T12:00:04Z"
    ended = exited(attempt2["mnist-worker-1"], 0, finished=finished)
    return job, [running(attempt2["mnist-master-0"]), running(attempt2["mnist-worker-0"]), ended]


def test_a_kept_member_that_exits_as_the_attempt_it_was_kept_from_finishes_makes_the_gang_recreated() -> None:
    """Rank 0 evicted as the run ended (2026-12-07): worker 1, kept, was moved to attempt 2 as its trainer
    finished attempt 1 and exited 0. It never joins attempt 2, whose rank 0 waited for it in the rendezvous
    until its 600 s timeout: the gang is recreated from the checkpoint (not in place: rank 0 is in that
    rendezvous), the member's end taken as the preemption that began it."""
    # Its exit 8 s after the pass that created attempt 2 began: that pass relabels after its creates.
    job, children = _kept_one_that_ends("2030-01-01T12:00:12Z")
    plan = plan_for(job, children, NOW + timedelta(seconds=13))
    restarting = after(job, plan)
    status = restarting["status"]
    assert (status["attempt"], status["restarts"]) == (3, {"failures": 0, "preemptions": 2, "total": 2})
    assert "inPlace" not in status["lastRestart"], status["lastRestart"]
    assert status["lastRestart"]["message"].startswith("pod mnist-worker-1: EndedBeforeItsAttempt"), status
    assert sorted(deleted(plan_for(restarting, children, NOW + timedelta(seconds=9)))) == NAMES


def test_a_kept_member_that_ends_well_after_its_attempt_began_is_that_attempts_end() -> None:
    """A worker ends a little before rank 0 at the end of any run: the job goes on to rank 0's end."""
    job, children = _kept_one_that_ends("2030-01-01T12:01:00Z")
    plan = plan_for(job, children, NOW + timedelta(seconds=61))
    assert plan.delete == plan.create == [] and after(job, plan)["status"]["attempt"] == 2
