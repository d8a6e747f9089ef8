"""Hot spares (spec.replicas[].spares) in whole passes: when they are started, how one takes a lost
member's rank (a label patch, no new pod), where the gang meets when a spare holds rank 0, and when
spares go."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from dtjob.api import DistributedTrainingJobSpec
from dtjob.core.names import (
    ATTEMPT_LABEL,
    ATTEMPT_RESYNC_ANNOTATION,
    RANK_LABEL,
    RENDEZVOUS_HOST_ANNOTATION,
    REPLICA_INDEX_LABEL,
    SPARE_LABEL,
)
from dtjob.core.plan import Plan, Relabel
from dtjob.core.progress import Report, received
from tests.support.builders import (
    NOW,
    SHUTTING_DOWN,
    deleting,
    disrupted_while_running,
    exited,
    manifest,
    node,
    pending,
    pods_of,
    preempted,
    running,
    service_of,
    template,
)
from tests.support.plan import after, deleted, needs_for, plan_for

WORKERS = manifest(
    {"role": "Worker", "count": 2, "spares": 1, "template": template()},
    runPolicy={"restartStrategy": "InPlace"},
)
HOST_OF = {
    name: f"{name}.mnist.team-a.svc"
    for name in ("mnist-worker-0", "mnist-worker-spare0", "mnist-worker-spare1")
}


def spare_pods(plan: Plan) -> list[dict[str, Any]]:
    return [p for p in plan.create if p["metadata"]["labels"].get(SPARE_LABEL) == "true"]


def relabelled(pod: dict[str, Any], patch: Relabel) -> dict[str, Any]:
    """The pod once the label patch landed (a merge patch: None removes)."""
    pod = copy.deepcopy(pod)
    for key, value in patch.labels.items():
        if value is None:
            pod["metadata"]["labels"].pop(key, None)
        else:
            pod["metadata"]["labels"][key] = value
    pod["metadata"].setdefault("annotations", {}).update(patch.annotations)
    return pod


def saving_on_sigterm(pod: dict[str, Any]) -> dict[str, Any]:
    """Evicted: being deleted, its trainer still running (it saves the step on SIGTERM)."""
    return deleting(disrupted_while_running(pod, "EvictionByEvictionAPI"))


def with_uid(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["uid"] = uid
    return pod


def running_gang() -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]:
    """WORKERS with attempt 1 created and running, and its spare created (not yet running)."""
    job = after(WORKERS, plan_for(WORKERS, [], NOW))
    pods = pods_of(WORKERS)
    members = [running(pods[name]) for name in ("mnist-worker-0", "mnist-worker-1")]
    plan = plan_for(job, [service_of(WORKERS), *members], NOW + timedelta(seconds=1))
    (spare,) = spare_pods(plan)
    return after(job, plan), pods, with_uid(spare, "uid-spare0")


def restart_recorded(
    lost: str, ending: Callable[[dict[str, Any]], dict[str, Any]] = preempted, spare_runs: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, dict[str, Any]], dict[str, Any]]:
    """running_gang once member `lost` ended as `ending` says (the other runs), after the pass that
    recorded attempt 2: the job, the children, attempt 1's pods and the spare."""
    job, pods, spare = running_gang()
    members = [
        (ending if name == lost else running)(pods[name]) for name in ("mnist-worker-0", "mnist-worker-1")
    ]
    children = [service_of(WORKERS), *members, running(spare) if spare_runs else pending(spare)]
    return after(job, plan_for(job, children, NOW + timedelta(seconds=2))), children, pods, spare


def test_a_spare_is_started_once_every_member_has_a_node_and_waits_unranked() -> None:
    first = plan_for(WORKERS, [], NOW)
    assert spare_pods(first) == []  # a spare created with the gang could take a member's node
    job, pods, spare = running_gang()
    assert spare["metadata"]["name"] == "mnist-worker-spare0"
    labels = spare["metadata"]["labels"]
    assert labels[SPARE_LABEL] == "true" and labels["training.dtjob.io/role"] == "Worker"
    assert not {ATTEMPT_LABEL, RANK_LABEL, REPLICA_INDEX_LABEL} & set(labels)
    assert spare["spec"]["hostname"] == "mnist-worker-spare0"
    assert spare["metadata"]["annotations"][RENDEZVOUS_HOST_ANNOTATION] == HOST_OF["mnist-worker-0"]

    members = [running(pods[name]) for name in ("mnist-worker-0", "mnist-worker-1")]
    plan = plan_for(job, [service_of(WORKERS), *members, pending(spare)], NOW + timedelta(seconds=2))
    assert plan.create == [] and plan.relabel == []
    assert after(job, plan)["status"]["replicaStatuses"] == [
        {"role": "Worker", "active": 2, "ready": 2, "succeeded": 0, "failed": 0, "spares": 1}
    ]
    plan = plan_for(job, [service_of(WORKERS), *members, running(spare)], NOW + timedelta(seconds=3))
    (workers,) = after(job, plan)["status"]["replicaStatuses"]
    assert (workers["spares"], workers["sparesRunning"]) == (1, 1)


def test_a_running_spare_takes_a_preempted_members_rank_and_a_new_spare_starts_behind_it() -> None:
    job, children, pods, spare = restart_recorded("mnist-worker-1")
    kept = pods["mnist-worker-0"]
    assert (job["status"]["attempt"], job["status"]["restarts"]["preemptions"]) == (2, 1)

    # The lost member's trainer has exited: nothing waits for its pod to go. One pass deletes it, moves
    # the survivor on, gives the spare rank 1 and starts a new spare.
    # Decided on a fresh listing: a cache that lags must not hand the rank to a second spare.
    assert needs_for(job, children, NOW + timedelta(seconds=3), listed=False).listing == ("mnist-worker-1",)
    plan = plan_for(job, children, NOW + timedelta(seconds=3))
    assert deleted(plan) == ["mnist-worker-1"]
    by_name = {r.name: r for r in plan.relabel}
    assert by_name["mnist-worker-0"].labels == {ATTEMPT_LABEL: "2"}
    taking = by_name["mnist-worker-spare0"]
    assert taking.uid == "uid-spare0"
    assert taking.labels == {REPLICA_INDEX_LABEL: "1", RANK_LABEL: "1", ATTEMPT_LABEL: "2", SPARE_LABEL: None}
    assert [p["metadata"]["name"] for p in plan.create] == ["mnist-worker-spare1"]
    created = next(c for c in after(job, plan)["status"]["conditions"] if c["type"] == "Created")
    assert created["message"] == (
        "created the pods of attempt 2; mnist-worker-0 train on in place; "
        "spare mnist-worker-spare0 takes the rank of mnist-worker-1"
    )

    # The spare is member 1 from then on. Once the relabels landed, each moved pod gets its attempt once
    # more in a patch of its own (the kubelet then syncs it again: names.ATTEMPT_RESYNC_ANNOTATION), and
    # the gang is whole: nothing more is written.
    job = after(job, plan)
    member = relabelled(running(spare), taking)
    attempt2 = relabelled(running(kept), by_name["mnist-worker-0"])
    new_spare = with_uid(spare_pods(plan)[0], "uid-spare1")
    whole = [service_of(WORKERS), attempt2, member, pending(new_spare)]
    resync = plan_for(job, whole, NOW + timedelta(seconds=4))
    assert {r.name: (r.labels, r.annotations) for r in resync.relabel} == {
        name: ({}, {ATTEMPT_RESYNC_ANNOTATION: "2"}) for name in ("mnist-worker-0", "mnist-worker-spare0")
    }
    attempt2, member = (relabelled(p, r) for p, r in zip((attempt2, member), resync.relabel, strict=True))
    whole = [service_of(WORKERS), attempt2, member, pending(new_spare)]
    settled = plan_for(job, whole, NOW + timedelta(seconds=4))
    assert settled.create == settled.delete == settled.relabel == []
    assert after(job, settled)["status"]["replicasReady"] == "2/2"

    # Preempted again, the member the spare became is lost as any member is.
    again = [service_of(WORKERS), attempt2, preempted(member), running(new_spare)]
    job = after(job, plan_for(job, again, NOW + timedelta(seconds=5)))
    assert job["status"]["attempt"] == 3
    plan = plan_for(job, again, NOW + timedelta(seconds=6))
    assert deleted(plan) == ["mnist-worker-spare0"]
    assert {r.name: r.labels.get(RANK_LABEL) for r in plan.relabel} == {
        "mnist-worker-0": None,
        "mnist-worker-spare1": "1",
    }
    # spare0's name is taken till its pod goes: the new spare is spare2.
    assert [p["metadata"]["name"] for p in plan.create] == ["mnist-worker-spare2"]


def test_a_spare_that_takes_rank_zero_moves_the_rendezvous_for_every_member() -> None:
    job, children, _, _ = restart_recorded("mnist-worker-0")
    plan = plan_for(job, children, NOW + timedelta(seconds=3))
    moved = {r.name: r for r in plan.relabel}
    assert moved["mnist-worker-spare0"].labels[RANK_LABEL] == "0"
    for name in ("mnist-worker-1", "mnist-worker-spare0"):
        assert moved[name].annotations == {RENDEZVOUS_HOST_ANNOTATION: HOST_OF["mnist-worker-spare0"]}
    (new_spare,) = plan.create
    env = {e["name"]: e.get("value") for e in new_spare["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == HOST_OF["mnist-worker-spare0"]
    assert new_spare["metadata"]["annotations"][RENDEZVOUS_HOST_ANNOTATION] == HOST_OF["mnist-worker-spare0"]


def test_a_spare_that_holds_rank_zero_leads_the_progress_and_its_success_ends_the_job() -> None:
    job, children, _, spare = restart_recorded("mnist-worker-0")
    plan = plan_for(job, children, NOW + timedelta(seconds=3))
    job = after(job, plan)
    moved = {r.name: r for r in plan.relabel}
    rank_zero = relabelled(running(spare), moved["mnist-worker-spare0"])
    other = relabelled(children[2], moved["mnist-worker-1"])
    gang = [service_of(WORKERS), rank_zero, other]
    # Only rank 0 publishes checkpoints: its reports say where the gang could resume, the others' not.
    ledger = received(None, 2, "mnist-worker-spare0", Report(step=40, lastCheckpointStep=40), NOW)
    ledger = received(ledger, 2, "mnist-worker-1", Report(step=41), NOW)
    plan = plan_for(job, gang, NOW + timedelta(seconds=4), ledger=ledger)
    progress = after(job, plan)["status"]["progress"]
    assert (progress["step"], progress["lastCheckpointStep"]) == (40, 40)

    done = plan_for(job, [service_of(WORKERS), exited(rank_zero, 0), other], NOW + timedelta(seconds=5))
    succeeded = next(c for c in after(job, done)["status"]["conditions"] if c["type"] == "Succeeded")
    assert succeeded["message"] == "rank-0 pod mnist-worker-spare0 succeeded"


def test_without_a_running_spare_the_lost_member_gets_a_new_pod_once_its_old_one_is_gone() -> None:
    job, children, pods, spare = restart_recorded("mnist-worker-1", spare_runs=False)
    kept = pods["mnist-worker-0"]
    plan = plan_for(job, children, NOW + timedelta(seconds=3))
    assert deleted(plan) == ["mnist-worker-1"] and plan.create == plan.relabel == []
    children = [service_of(WORKERS), running(kept), pending(spare)]
    plan = plan_for(job, children, NOW + timedelta(seconds=4), listed=False)  # no spare takes it: no listing
    assert [p["metadata"]["name"] for p in plan.create] == ["mnist-worker-1"]


def test_members_created_without_the_resync_annotation_get_it_once_and_keep_their_pods() -> None:
    # An operator upgraded under a running in-place gang whose pods an earlier build created without it.
    job, pods, spare = running_gang()
    members = [running(pods[name]) for name in ("mnist-worker-0", "mnist-worker-1")]
    for pod in members:
        del pod["metadata"]["annotations"][ATTEMPT_RESYNC_ANNOTATION]
    children = [service_of(WORKERS), *members, running(spare)]
    plan = plan_for(job, children, NOW + timedelta(seconds=2))
    assert plan.create == plan.delete == []
    assert {r.name: (r.labels, r.annotations) for r in plan.relabel} == {
        name: ({}, {ATTEMPT_RESYNC_ANNOTATION: "1"}) for name in ("mnist-worker-0", "mnist-worker-1")
    }
    patched = [relabelled(pod, r) for pod, r in zip(members, plan.relabel, strict=True)]
    settled = plan_for(
        after(job, plan), [service_of(WORKERS), *patched, running(spare)], NOW + timedelta(seconds=3)
    )
    assert settled.create == settled.delete == settled.relabel == []


def test_a_member_still_saving_on_its_way_out_does_not_hold_the_takeover_back() -> None:
    """Its trainer saves the step on SIGTERM with the others, then exits: it stays in attempt 1 (a pod
    being deleted is never moved on), so it cannot join attempt 2's rendezvous, and the spare does not
    wait for it to exit, nor for its pod to go."""
    job, children, _, _ = restart_recorded("mnist-worker-1", saving_on_sigterm)
    assert job["status"]["attempt"] == 2
    plan = plan_for(job, children, NOW + timedelta(seconds=3))
    assert deleted(plan) == []  # being deleted already
    assert {r.name: r.labels.get(RANK_LABEL) for r in plan.relabel} == {
        "mnist-worker-0": None,
        "mnist-worker-spare0": "1",
    }
    job = after(job, plan)
    moved = [relabelled(pod, r) for pod, r in zip((children[1], children[3]), plan.relabel, strict=True)]
    later = plan_for(job, [children[0], *moved, children[2]], NOW + timedelta(seconds=4))
    assert [r.annotations for r in later.relabel] == [{ATTEMPT_RESYNC_ANNOTATION: "2"}] * 2
    assert later.delete == []


def test_spares_that_end_are_replaced_and_all_go_when_the_gang_ends() -> None:
    job, pods, spare = running_gang()
    members = [running(pods[name]) for name in ("mnist-worker-0", "mnist-worker-1")]
    plan = plan_for(job, [service_of(WORKERS), *members, exited(spare, 1)], NOW + timedelta(seconds=2))
    assert deleted(plan) == ["mnist-worker-spare0"]
    assert after(job, plan)["status"]["restarts"]["total"] == 0  # a spare's end is no member's
    plan = plan_for(job, [service_of(WORKERS), *members], NOW + timedelta(seconds=3))
    assert [p["metadata"]["name"] for p in plan.create] == ["mnist-worker-spare0"]

    done = [exited(pods["mnist-worker-0"], 0), running(pods["mnist-worker-1"]), running(spare)]
    plan = plan_for(job, [service_of(WORKERS), *done], NOW + timedelta(seconds=4))
    assert after(job, plan)["status"]["phase"] == "Succeeded"
    assert "mnist-worker-spare0" in deleted(plan)

    suspended = {**job, "spec": {**job["spec"], "runPolicy": {"restartStrategy": "InPlace", "suspend": True}}}
    plan = plan_for(suspended, [service_of(WORKERS), *members, running(spare)], NOW + timedelta(seconds=5))
    assert sorted(deleted(plan)) == ["mnist-worker-0", "mnist-worker-1", "mnist-worker-spare0"]


def test_spares_need_in_place_restarts_and_one_process_a_pod() -> None:
    spec = WORKERS["spec"]
    assert DistributedTrainingJobSpec.model_validate(spec).replicas[0].spares == 1
    recreate = {**spec, "runPolicy": {}}
    assert "spares needs spec.runPolicy.restartStrategy InPlace" in _refusal(recreate)
    four = {**spec, "accelerator": {"type": "nvidia-l4", "count": 4}}
    assert "one process a pod" in _refusal(four)
    assert DistributedTrainingJobSpec.model_validate({**four, "torch": {"nprocPerNode": 1}})


def _refusal(spec: dict[str, Any]) -> str:
    try:
        DistributedTrainingJobSpec.model_validate(spec)
    except ValueError as error:
        return str(error)
    raise AssertionError("accepted")


def on(node_name: str, pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["nodeName"] = node_name
    return pod


def test_a_spare_on_the_node_being_reclaimed_takes_no_rank_and_goes_with_it() -> None:
    """A Spot VM's reclaim takes every pod of its node: the member there is a preemption from the
    notice on, and the spare beside it, going too, gets no rank (the member gets a new pod instead)."""
    job, pods, spare = running_gang()
    reclaimed = node("gpu-node-2", ready="False", since="2030-01-01T12:00:01Z", message=SHUTTING_DOWN)
    nodes = [node(), reclaimed]
    children = [
        service_of(WORKERS),
        running(pods["mnist-worker-0"]),
        on("gpu-node-2", running(pods["mnist-worker-1"])),
        on("gpu-node-2", running(spare)),
    ]
    job = after(job, plan_for(job, children, NOW + timedelta(seconds=2), nodes=nodes))
    assert (job["status"]["attempt"], job["status"]["lastRestart"]["inPlace"]) == (2, True)
    plan = plan_for(job, children, NOW + timedelta(seconds=3), nodes=nodes)
    assert sorted(deleted(plan)) == ["mnist-worker-1", "mnist-worker-spare0"]
    assert all(RANK_LABEL not in r.labels for r in plan.relabel), plan.relabel
