"""Gang fault tolerance against a real apiserver, the test playing the kubelet of kwok's fake GPU nodes:
failures, spot preemptions, evictions, deleted pods and nodes, pods stuck Terminating, an operator
stopped mid-restart, and exhausted budgets (tier B)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client

from dtjob.core.names import ATTEMPT_LABEL, JOB_NAME_LABEL, RANK_LABEL, SPARE_LABEL, named_as_spare
from localcluster import Cluster, sim
from tests.support.jobs import Jobs, events_of, gang_job, gang_of_attempt, status_of, still_there
from tests.support.operator import running_operator
from tests.support.reads import wait_event
from tests.support.waiting import wait_for


def test_a_worker_that_exits_1_under_on_failure_restarts_the_whole_gang_once_as_attempt_2(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("crash", workers=2, master=True))
    first = gang_of_attempt(jobs, "crash", 1, 3)
    node = next(p.spec.node_name for p in first if p.metadata.name == "crash-worker-1")
    sim.exit_pod(core, namespace, "crash-worker-1", exit_code=1)
    second = gang_of_attempt(jobs, "crash", 2, 3)
    assert not {p.metadata.uid for p in second} & {p.metadata.uid for p in first}
    jobs.wait_condition("crash", "Running")
    status = status_of(jobs, "crash")
    assert (status["attempt"], status["restarts"]) == (2, {"failures": 1, "preemptions": 0, "total": 1})
    assert status["lastRestart"]["reason"] == "PodFailed"
    assert f"pod crash-worker-1: Error, exit code 1, on node {node}" in status["lastRestart"]["message"]
    wait_event(core, namespace, "crash", "PodFailed")
    warnings = [(e.reason, e.message) for e in events_of(core, namespace, "crash") if e.type == "Warning"]
    assert [r for r, _ in warnings] == ["PodFailed"] and "attempt 2: pod crash-worker-1" in warnings[0][1]


def test_a_worker_that_exits_1_under_exit_code_fails_the_job(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("strict", workers=2, runPolicy={"restartPolicy": "ExitCode"}))
    gang_of_attempt(jobs, "strict", 1, 2)
    sim.exit_pod(core, namespace, "strict-worker-0", exit_code=1)
    failed = jobs.wait_condition("strict", "Failed")
    assert failed["reason"] == "PodFailed" and "exit code 1" in failed["message"]
    assert "permanent under restartPolicy ExitCode" in failed["message"]
    # cleanPodPolicy Running: the peer still running goes, the failed pod stays for its logs.
    assert [p.metadata.name for p in jobs.wait_pods("strict", 1)] == ["strict-worker-0"]
    assert status_of(jobs, "strict")["restarts"]["total"] == 0


def test_spot_preemptions_restart_the_gang_at_once_without_touching_the_backoff_limit(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("spot", workers=2, runPolicy={"backoffLimit": 1}))
    gang_of_attempt(jobs, "spot", 1, 2)
    for attempt in (2, 3, 4):  # more preemptions than backoffLimit allows failures
        sim.preempt_pod(core, namespace, "spot-worker-1")
        gang_of_attempt(jobs, "spot", attempt, 2)
    jobs.wait_condition("spot", "Running")
    status = status_of(jobs, "spot")
    assert status["restarts"] == {"failures": 0, "preemptions": 3, "total": 3}
    assert (
        status["lastRestart"]["reason"] == "Preempted"
        and "TerminationByKubelet" in status["lastRestart"]["message"]
    )
    assert jobs.condition("spot", "Failed") is None


def test_evicting_a_worker_through_the_eviction_api_restarts_the_gang_as_a_preemption(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("drain", workers=2))
    gang_of_attempt(jobs, "drain", 1, 2)
    # kwok would finish the pod at once; a real kubelet takes the grace period, during which the pod
    # shows the DisruptionTarget condition the Eviction API put on it.
    sim.stick_terminating(core, namespace, "drain-worker-0")
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="drain-worker-0", namespace=namespace))
    core.create_namespaced_pod_eviction("drain-worker-0", namespace, eviction)
    wait_for(lambda: status_of(jobs, "drain").get("attempt") == 2, "attempt 2 recorded in the status")
    core.delete_namespaced_pod("drain-worker-0", namespace, grace_period_seconds=0)  # the kubelet is done
    gang_of_attempt(jobs, "drain", 2, 2)
    status = status_of(jobs, "drain")
    assert status["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
    assert "EvictionByEvictionAPI" in status["lastRestart"]["message"]


def test_a_worker_deleted_by_hand_restarts_the_gang_instead_of_rejoining_the_old_one(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("kicked", workers=3))
    gang_of_attempt(jobs, "kicked", 1, 3)
    core.delete_namespaced_pod("kicked-worker-2", namespace)
    gang_of_attempt(jobs, "kicked", 2, 3)
    status = status_of(jobs, "kicked")
    assert status["restarts"] == {"failures": 1, "preemptions": 0, "total": 1}
    assert status["lastRestart"]["message"].startswith("pod kicked-worker-2:")


def test_a_deleted_node_restarts_the_gang_on_other_nodes(
    operator: KopfRunner, own_nodes: list[str], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("lost", workers=2, nodes=own_nodes))
    first = gang_of_attempt(jobs, "lost", 1, 2)
    own_node = first[0].spec.node_name
    core.delete_node(own_node)
    # Well before the pod GC's 40 s quarantine: the operator sees the node gone on its own.
    second = gang_of_attempt(jobs, "lost", 2, 2, timeout=30)
    assert own_node not in {p.spec.node_name for p in second}
    status = status_of(jobs, "lost")
    assert status["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
    assert (
        f"NodeLost, on node {own_node}: node {own_node} no longer exists" in status["lastRestart"]["message"]
    )
    assert not any(still_there(core, namespace, p) for p in first)


def test_a_deleted_node_under_in_place_recreates_the_gang_with_the_hot_spare_in_it(
    operator: KopfRunner, own_nodes: list[str], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    """A lost node, not an eviction: its member's processes vanish without closing their connections, so
    a peer may wait in a collective until its timeout. Even under InPlace the whole gang is recreated
    (docs/fault-tolerance.md), and the waiting spare takes a rank of the new attempt at once."""
    job = gang_job(
        "lost-spare",
        workers=2,
        nodes=own_nodes,
        torch={"nprocPerNode": 1},
        runPolicy={"restartStrategy": "InPlace"},
    )
    worker = job["spec"]["replicas"][0]
    worker["spares"] = 1
    apart = {"labelSelector": {"matchLabels": {JOB_NAME_LABEL: "lost-spare"}},
             "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
    worker["template"]["spec"]["affinity"]["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [apart]
    }

    def live(pod: client.V1Pod) -> bool:
        return pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None

    def spare() -> client.V1Pod | None:
        pods = [p for p in jobs.pods("lost-spare") if (p.metadata.labels or {}).get(SPARE_LABEL) == "true"]
        return pods[0] if len(pods) == 1 and live(pods[0]) else None

    def members(attempt: int) -> dict[str, client.V1Pod] | None:
        pods = jobs.pods("lost-spare")
        of_attempt = [p for p in pods if (p.metadata.labels or {}).get(ATTEMPT_LABEL) == str(attempt)]
        ranks = {p.metadata.labels[RANK_LABEL]: p for p in of_attempt if live(p)}
        return ranks if sorted(ranks) == ["0", "1"] else None

    jobs.create(job)
    first = wait_for(lambda: members(1), "attempt 1's two members running")
    waiting = wait_for(spare, "the spare running")
    lost_node = first["1"].spec.node_name
    core.delete_node(lost_node)
    second = wait_for(lambda: members(2), "attempt 2 with both ranks", timeout=30)
    uids = {p.metadata.uid for p in second.values()}
    assert waiting.metadata.uid in uids, "the spare took no rank"
    assert any(named_as_spare(p.metadata.name) for p in second.values())
    assert first["0"].metadata.uid not in uids, "a peer of the lost member was kept"
    status = status_of(jobs, "lost-spare")
    assert status["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
    assert f"NodeLost, on node {lost_node}" in status["lastRestart"]["message"]
    assert not still_there(core, namespace, first["1"])


def test_a_pod_stuck_terminating_on_a_lost_node_is_force_deleted_after_its_grace(
    operator: KopfRunner, own_nodes: list[str], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("stuck", workers=2, nodes=own_nodes))
    doomed = gang_of_attempt(jobs, "stuck", 1, 2)[0]
    own_node = doomed.spec.node_name
    sim.stick_terminating(core, namespace, doomed.metadata.name)
    core.delete_node(own_node)
    wait_for(
        lambda: not still_there(core, namespace, doomed), "the stuck pod to be force-deleted", timeout=25
    )
    gang_of_attempt(jobs, "stuck", 2, 2)
    forced = wait_event(core, namespace, "stuck", "ForceDeleted")
    assert doomed.metadata.name in forced.message and own_node in forced.message


def test_an_operator_stopped_mid_restart_finishes_it_with_exactly_one_next_attempt(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    with running_operator(cluster_b, namespace):
        jobs.create(gang_job("resume", workers=3))
        gang_of_attempt(jobs, "resume", 1, 3)
        # One old pod will not go (its kubelet hangs), so the restart stops half-way: attempt 2 is
        # recorded, the old gang is being deleted, no new pod may start yet.
        sim.stick_terminating(core, namespace, "resume-worker-2")
        sim.preempt_pod(core, namespace, "resume-worker-0")
        wait_for(lambda: status_of(jobs, "resume").get("attempt") == 2, "attempt 2 recorded in the status")
        wait_for(lambda: not jobs.pods("resume"), "the old gang deleted (one pod still terminating)")
        # Posted after the deletes, and never once the operator stops (its writes are fenced off then).
        wait_event(core, namespace, "resume", "Preempted")
    pods = core.list_namespaced_pod(namespace).items
    assert [(p.metadata.name, bool(p.metadata.deletion_timestamp)) for p in pods] == [
        ("resume-worker-2", True)
    ]
    core.delete_namespaced_pod("resume-worker-2", namespace, grace_period_seconds=0)  # the kubelet is back
    with running_operator(cluster_b, namespace):
        gang = gang_of_attempt(jobs, "resume", 2, 3)
        jobs.wait_condition("resume", "Running")
        status = status_of(jobs, "resume")
        assert (status["attempt"], status["restarts"]) == (2, {"failures": 0, "preemptions": 1, "total": 1})
        every = core.list_namespaced_pod(namespace).items
        assert sorted(p.metadata.uid for p in every) == sorted(p.metadata.uid for p in gang)
    assert [e.reason for e in events_of(core, namespace, "resume") if e.type == "Warning"] == ["Preempted"]


@pytest.mark.parametrize(
    ("run_policy", "end", "reason", "message", "restarts"),
    [
        pytest.param({"maxPreemptions": 1}, lambda core, ns, pod: sim.preempt_pod(core, ns, pod, "PreemptionByScheduler"),
                     "MaxPreemptionsExceeded", "maxPreemptions (1) reached; last: pod budget-worker-1: PreemptionByScheduler",
                     {"failures": 0, "preemptions": 1, "total": 1}, id="maxPreemptions, naming the last preemption"),
        pytest.param({"backoffLimit": 1}, lambda core, ns, pod: sim.exit_pod(core, ns, pod, 137, reason="OOMKilled"),
                     "BackoffLimitExceeded", "backoffLimit (1) reached; last: pod budget-worker-1: OOMKilled, exit code 137",
                     {"failures": 1, "preemptions": 0, "total": 1}, id="backoffLimit, with the last pod's reason and exit code"),
    ],
)  # fmt: skip
def test_running_out_of_a_restart_budget_fails_the_job(
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    run_policy: dict[str, int],
    end: Callable[[client.CoreV1Api, str, str], None],
    reason: str,
    message: str,
    restarts: dict[str, int],
) -> None:
    jobs.create(gang_job("budget", workers=2, runPolicy=run_policy))
    gang_of_attempt(jobs, "budget", 1, 2)
    end(core, namespace, "budget-worker-0")
    gang_of_attempt(jobs, "budget", 2, 2)  # a failure restart waits out its 5 s backoff first
    end(core, namespace, "budget-worker-1")
    failed = jobs.wait_condition("budget", "Failed")
    assert failed["reason"] == reason and failed["message"].startswith(message)
    assert status_of(jobs, "budget")["restarts"] == restarts


def test_a_pod_left_unschedulable_past_the_scheduling_timeout_fails_the_job_with_the_schedulers_message(
    operator: KopfRunner, jobs: Jobs
) -> None:
    no_such_gpus = {"type": "nvidia-tesla-t4", "count": 1}
    jobs.create(
        gang_job("nowhere", workers=2, accelerator=no_such_gpus, runPolicy={"schedulingTimeoutSeconds": 4})
    )
    failed = jobs.wait_condition("nowhere", "Failed")
    assert failed["reason"] == "SchedulingTimeout"
    assert (
        "was not scheduled within 4s: 0/" in failed["message"] and "nodes are available" in failed["message"]
    )
    # Before the timeout, the scheduler's word was on the job already (and stays beside the failure).
    unschedulable = jobs.condition("nowhere", "Unschedulable")
    assert unschedulable is not None and unschedulable["status"] == "True", unschedulable
    assert "pod(s) cannot be scheduled (nowhere-worker-" in unschedulable["message"]
    assert "nodes are available" in unschedulable["message"]
    jobs.wait_pods("nowhere", 0)  # cleanPodPolicy Running: pending pods go too
