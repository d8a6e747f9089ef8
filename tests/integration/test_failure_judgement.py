"""Every failure explained and charged to the right budget, against a real apiserver (tier B), the test
playing the kubelet and the node controller in the orderings GKE shows: the peers of a preempted pod
crash before its own status or its node says anything; a whole node shutdown whose preempted pod ends
only after the gang was restarted; torchrun exits 1 after its workers saved; a crashed trainer's last
words reach the restart Event; a pod the apiserver refuses makes the job Invalid; TensorFlow's PS and
Evaluator."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client

from dtjob.core.names import ATTEMPT_LABEL
from localcluster import Cluster, fakenodes, sim
from tests.support.jobs import (
    OWN_NODE_TAINT,
    Jobs,
    events_of,
    gang_job,
    gang_of_attempt,
    pin_to_nodes,
    pytorch_job,
    status_of,
    still_there,
)
from tests.support.operator import Records, wake
from tests.support.reads import wait_event
from tests.support.waiting import wait_for

# Longer than any test takes to play its ordering: a disruption seen ends the window at once.
SETTLE: dict[str, Any] = {"failureSettleSeconds": 120}


def split_gang(
    name: str, nodes: list[str], replacement: str | None = None, **run_policy: Any
) -> dict[str, Any]:
    """Master on nodes[0], the Workers on nodes[1] and nodes[2] (a pod takes a node's 8 GPUs): what
    happens to the master's node leaves its peers running elsewhere. A later Master may also go to
    `replacement`, a node that joins only once the Master's node is gone."""
    job = gang_job(name, workers=2, master=True, runPolicy={**SETTLE, **run_policy})
    master_hosts = nodes[:1] + ([replacement] if replacement else [])
    for replica, hosts_of_role in zip(job["spec"]["replicas"], (master_hosts, nodes[1:]), strict=True):
        pin_to_nodes(replica["template"]["spec"], hosts_of_role)
    return job


def peers_crash(core: client.CoreV1Api, namespace: str, name: str) -> None:
    """Both Workers exit 1 (their collective broke), and the operator watches the gang for a disruption."""
    for worker in (f"{name}-worker-0", f"{name}-worker-1"):
        sim.exit_pod(core, namespace, worker, exit_code=1)


def settling(jobs: Jobs, name: str) -> dict[str, Any]:
    return wait_for(
        lambda: (c := jobs.condition(name, "Restarting")) is not None and c["reason"] == "Settling" and c,
        f"{name} watched for a disruption (Restarting=True, Settling)",
    )


def restarted(jobs: Jobs, name: str) -> dict[str, Any]:
    wait_for(lambda: status_of(jobs, name).get("attempt") == 2, f"attempt 2 of {name} recorded")
    return status_of(jobs, name)


@pytest.mark.parametrize(
    "disrupt",
    [
        pytest.param(lambda core, ns, node, pod: sim.mark_disruption_target(core, ns, pod),
                     id="graceful node shutdown: DisruptionTarget on the still-running pod"),
        pytest.param(lambda core, ns, node, pod: sim.taint_for_termination(core, node),
                     id="GKE taints the node for termination"),
        pytest.param(lambda core, ns, node, pod: sim.silence_node(core, node),
                     id="the Spot VM vanished: its node stops reporting, its pod still says Running"),
        pytest.param(lambda core, ns, node, pod: sim.evict_for_pressure(core, ns, pod),
                     id="the kubelet evicts the pod under memory pressure"),
    ],
)  # fmt: skip
def test_peers_that_crash_before_the_disruption_shows_are_charged_to_the_preemption(
    disrupt: Any,
    operator: KopfRunner,
    own_nodes: list[str],
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    # restartPolicy ExitCode makes exit 1 permanent: judged pod by pod, the job would fail outright.
    jobs.create(split_gang("gke", own_nodes, restartPolicy="ExitCode"))
    gang_of_attempt(jobs, "gke", 1, 3)
    peers_crash(core, namespace, "gke")
    watching = settling(jobs, "gke")
    assert "gke-worker-" in watching["message"] and "exit code 1" in watching["message"]
    assert status_of(jobs, "gke")["restarts"]["total"] == 0

    disrupt(core, namespace, own_nodes[0], "gke-master-0")
    status = restarted(jobs, "gke")
    assert status["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
    assert status["lastRestart"]["reason"] == "Preempted"
    assert "gke-master-0" in status["lastRestart"]["message"]
    assert jobs.condition("gke", "Failed") is None

    def warnings() -> list[str]:
        # The next Master may wait for a node (its own is going): that is news, not a failure.
        seen = [e.reason for e in events_of(core, namespace, "gke") if e.type == "Warning"]
        return [reason for reason in seen if reason != "PodUnschedulable"]

    # The Event follows the status write (the Writer posts events last): it may come a moment later.
    wait_for(warnings, "the restart's Warning Event")
    assert warnings() == ["Preempted"]


def node_name(index: int) -> str:
    name: str = fakenodes.gpu_node(index)["metadata"]["name"]
    return name


@pytest.fixture
def replacement(core: client.CoreV1Api) -> Iterator[int]:
    """The index of a fake GPU node that does not exist yet: the VM GKE brings up in place of a reclaimed
    one (out of own_nodes' range); removed afterwards."""
    index = random.randrange(10000, 15000)
    yield index
    try:
        core.delete_node(node_name(index))
    except client.ApiException as err:
        if err.status != 404:
            raise


def being_deleted(core: client.CoreV1Api, namespace: str, pod: client.V1Pod) -> bool:
    """That very pod (not the next attempt's, of the same name) is terminating."""
    now = core.read_namespaced_pod(pod.metadata.name, namespace)
    return bool(now.metadata.uid == pod.metadata.uid and now.metadata.deletion_timestamp)


NODE_SHUTDOWNS = [
    pytest.param("OnFailure", 137, True,
                 id="OnFailure: the Master is killed at the end of its grace (137), its kubelet confirms"),
    pytest.param("ExitCode", 1, True,
                 id="ExitCode: torchrun exits 1 on SIGTERM (permanent if charged), its kubelet confirms"),
    pytest.param("ExitCode", 137, False,
                 id="ExitCode: the Master is killed (137), then its node is deleted and the pod force-deleted"),
]  # fmt: skip


@pytest.mark.parametrize(("restart_policy", "late_exit_code", "kubelet_confirms"), NODE_SHUTDOWNS)
def test_a_whole_node_shutdown_is_one_preemption_and_the_late_end_of_its_pod_charges_nothing_more(
    restart_policy: str,
    late_exit_code: int,
    kubelet_confirms: bool,
    operator: KopfRunner,
    cluster_b: Cluster,
    own_nodes: list[str],
    replacement: int,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    """The real sequence of a node shutdown, each step played only once the operator has seen the one
    before: the preempted pod's own end arrives after its gang was judged, restarted and deleted."""
    jobs.create(
        split_gang("down", own_nodes, replacement=node_name(replacement), restartPolicy=restart_policy)
    )
    master = next(p for p in gang_of_attempt(jobs, "down", 1, 3) if p.metadata.name == "down-master-0")
    assert master.spec.node_name == own_nodes[0]

    # 1. The peers on the other nodes see their collective break, and exit 1 first.
    peers_crash(core, namespace, "down")
    settling(jobs, "down")
    assert status_of(jobs, "down")["restarts"]["total"] == 0

    # 2. GKE taints the Master's node and its kubelet turns it NotReady. 3. The kubelet begins to kill the
    # Master: DisruptionTarget on the still-running pod. The gang is judged a preemption.
    sim.begin_node_shutdown(core, namespace, own_nodes[0], [master.metadata.name])
    sim.mark_disruption_target(core, namespace, master.metadata.name)
    status = restarted(jobs, "down")
    charged = {"failures": 0, "preemptions": 1, "total": 1}
    assert status["restarts"] == charged
    assert status["lastRestart"]["reason"] == "Preempted"
    assert "down-master-0" in status["lastRestart"]["message"]

    # The operator deletes attempt 1; the Master's kubelet, still shutting down, holds on to its pod, and
    # attempt 2 waits until it is gone.
    wait_for(lambda: being_deleted(core, namespace, master), "the operator deleting attempt 1's Master")
    assert [p.metadata.name for p in jobs.pods("down") if p.metadata.labels[ATTEMPT_LABEL] != "1"] == []

    # 4. The grace period is over: the Master's end, long after the gang was judged and restarted.
    name, uid = master.metadata.name, master.metadata.uid
    assert sim.end_after_shutdown(core, namespace, name, uid, late_exit_code), "gone before its late end"

    # 5. The kubelet confirms the deletion; or the VM is gone, GKE deletes the node, and the operator
    # force-deletes the pod that ended but that no kubelet will ever confirm.
    if kubelet_confirms:
        assert sim.finalise_pod(core, namespace, name, uid)
    else:
        core.delete_node(own_nodes[0])
    wait_for(lambda: not still_there(core, namespace, master), "attempt 1's Master gone", timeout=25)

    # A replacement VM joins, the next Master goes there, and the gang of attempt 2 runs.
    sim.add_gpu_node(cluster_b, replacement, extra_taints=(OWN_NODE_TAINT,))
    gang_of_attempt(jobs, "down", 2, 3)
    status = status_of(jobs, "down")
    assert (status["attempt"], status["restarts"]) == (2, charged)  # the late end charged nothing
    assert jobs.condition("down", "Failed") is None
    # The next Master waited for a node, and a pod no kubelet would confirm was force-deleted: news only.
    news = ("PodUnschedulable", "ForceDeleted")
    wait_event(core, namespace, "down", "Preempted")
    warnings = [e.reason for e in events_of(core, namespace, "down") if e.type == "Warning"]
    assert [reason for reason in warnings if reason not in news] == ["Preempted"]


def test_a_second_break_of_the_same_job_gets_its_full_settle_window(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    """The settle window's start (status.brokenSince) is removed from the stored status once the restart
    is recorded, so the next break is watched for the whole window again, not charged at once."""
    jobs.create(gang_job("twice", workers=2, runPolicy={"failureSettleSeconds": 3}))
    for attempt, crashing in ((1, "twice-worker-0"), (2, "twice-worker-1")):
        gang_of_attempt(jobs, "twice", attempt, 2)
        assert "brokenSince" not in status_of(jobs, "twice"), "a finished settle window left on the job"
        sim.exit_pod(core, namespace, crashing, exit_code=1)
        watching = settling(jobs, "twice")  # the second break too: not charged before its window ran
        assert crashing in watching["message"] and status_of(jobs, "twice")["attempt"] == attempt
        wait_for(lambda a=attempt: status_of(jobs, "twice").get("attempt") == a + 1, f"attempt {attempt + 1}")
    assert status_of(jobs, "twice")["restarts"] == {"failures": 2, "preemptions": 0, "total": 2}


def test_torchrun_exiting_1_after_its_workers_saved_a_checkpoint_is_a_preemption(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("torchrun", workers=2, runPolicy={**SETTLE, "restartPolicy": "ExitCode"}))
    gang_of_attempt(jobs, "torchrun", 1, 2)
    saved = sim.trainer_outcome("PreemptedCheckpointSaved", "stopped and saved after step 41 (SIGTERM)", 41)
    sim.end_pod(core, namespace, "torchrun-worker-0", exit_code=1, message=saved)
    status = restarted(jobs, "torchrun")  # no settle window: the trainer said what happened
    assert status["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
    assert "PreemptedCheckpointSaved, exit code 1" in status["lastRestart"]["message"]
    assert "stopped and saved after step 41" in status["lastRestart"]["message"]


def test_a_crash_with_nothing_disrupted_is_a_failure_whose_error_line_reaches_the_event_and_status(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(gang_job("crash", workers=2))  # settles 2 s
    gang_of_attempt(jobs, "crash", 1, 2)
    log = "\n".join(f"step {i}: loss {1 / (i + 1):.4f}" for i in range(300))
    error = "PermissionError: [Errno 13] Permission denied: '/models/final.pt'"
    sim.end_pod(
        core,
        namespace,
        "crash-worker-1",
        exit_code=1,
        message=f"{log}\nTraceback (most recent call last):\n{error}",
    )
    status = restarted(jobs, "crash")
    assert status["restarts"] == {"failures": 1, "preemptions": 0, "total": 1}
    assert status["lastRestart"]["message"].endswith(error)
    assert len(status["lastRestart"]["message"]) < 800  # the tail, not the whole log
    restart = wait_event(core, namespace, "crash", "PodFailed")
    assert restart.type == "Warning" and restart.message.endswith(error)
    settled = wait_event(core, namespace, "crash", "Settling")
    assert "watching the gang for a disruption for up to 2s" in settled.message


REFUSED_TEMPLATES = [
    pytest.param([{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "spec.containers[0].env[", id="refused by the apiserver (422)"),
    pytest.param([{"name": "A", "valueFrom": "x"}], "spec.containers[0].env[",
                 id="refused by the client's schema check"),
]  # fmt: skip


@pytest.mark.parametrize(("env", "field"), REFUSED_TEMPLATES)
def test_a_pod_the_apiserver_refuses_makes_the_job_invalid_until_the_spec_is_fixed(
    env: list[dict[str, Any]],
    field: str,
    adapter_log: Records,
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    job = pytorch_job("refused", workers=2)
    job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]["env"] = env
    jobs.create(job)
    invalid = jobs.wait_condition("refused", "Invalid")
    assert invalid["reason"] == "PodRefused" and field in invalid["message"]
    assert "].valueFrom" in invalid["message"] and "is the variable 'A'" in invalid["message"]
    assert status_of(jobs, "refused")["phase"] == "Invalid"
    wait_event(core, namespace, "refused", "PodRefused")
    refusals = [e for e in events_of(core, namespace, "refused") if e.reason == "PodRefused"]
    assert len(refusals) == 1 and refusals[0].type == "Warning" and field in refusals[0].message
    assert jobs.pods("refused") == []
    # Said once, in one pass: woken again, the operator neither retries the pods nor logs a failed pass.
    invalid_status = status_of(jobs, "refused")
    for n in range(3):
        wake(jobs, "refused", n)
    assert jobs.pods("refused") == [] and status_of(jobs, "refused") == invalid_status
    assert [m for m in adapter_log.messages if m.startswith("reconcile of")] == []

    # As the message says: the fix goes in with a suspension (running pods cannot change), then resume.
    replicas = job["spec"]["replicas"]
    replicas[0]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "x"}]
    jobs.patch("refused", {"spec": {"replicas": replicas, "runPolicy": {"suspend": True}}})
    jobs.wait_condition("refused", "Invalid", status="False")
    jobs.patch("refused", {"spec": {"runPolicy": {"suspend": False}}})
    jobs.wait_condition("refused", "Running")
    refusals = [e for e in events_of(core, namespace, "refused") if e.reason == "PodRefused"]
    assert [e.count for e in refusals] == [1]  # said once: no retry loop


def tensorflow_job(name: str, **run_policy: Any) -> dict[str, Any]:
    """Chief, one Worker, one PS and an Evaluator, on fake GPU nodes."""
    job = pytorch_job(name, workers=1, master=True, runPolicy={"failureSettleSeconds": 2, **run_policy})
    template = job["spec"]["replicas"][0]["template"]
    job["spec"]["framework"] = "TensorFlow"
    job["spec"]["replicas"] = [{"role": role, "count": 1, "template": copy.deepcopy(template)}
                               for role in ("Chief", "Worker", "PS", "Evaluator")]  # fmt: skip
    for cpu_role in job["spec"]["replicas"][2:]:
        # PS and Evaluator need no GPU: keep them on kwok's GPU nodes (tier B has no other fake nodes),
        # off the real node a tier-C test may have left registered, where no image would ever pull.
        cpu_role["template"]["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        cpu_role["template"]["spec"]["nodeSelector"] = {"type": "kwok"}
    return job


def test_a_failed_evaluator_restarts_nothing_a_failed_ps_restarts_the_gang_and_all_workers_finish_it(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(tensorflow_job("tf", successPolicy="AllWorkers"))
    gang_of_attempt(jobs, "tf", 1, 4)

    sim.exit_pod(core, namespace, "tf-evaluator-0", exit_code=1)

    def evaluator_failed() -> bool:
        roles = {r["role"]: r for r in status_of(jobs, "tf").get("replicaStatuses", [])}
        return roles.get("Evaluator", {}).get("failed") == 1

    wait_for(evaluator_failed, "the Evaluator's failure in replicaStatuses")
    status = status_of(jobs, "tf")
    assert (status["attempt"], status["restarts"]["total"]) == (1, 0)

    sim.exit_pod(core, namespace, "tf-ps-0", exit_code=1)
    status = restarted(jobs, "tf")
    assert status["restarts"] == {"failures": 1, "preemptions": 0, "total": 1}
    assert status["lastRestart"]["message"].startswith("pod tf-ps-0: Error, exit code 1")
    gang_of_attempt(jobs, "tf", 2, 4)

    sim.exit_pod(core, namespace, "tf-worker-0", exit_code=0)
    done = jobs.wait_condition("tf", "Succeeded")
    assert done["reason"] == "AllWorkersSucceeded"
    # cleanPodPolicy Running: the PS, the Chief and the Evaluator, still serving, go.
    assert [p.metadata.name for p in jobs.wait_pods("tf", 1)] == ["tf-worker-0"]
