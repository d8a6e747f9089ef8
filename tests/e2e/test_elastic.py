"""Elastic PyTorch on the real node (tier C): the elastic example (torchrun's c10d rendezvous, 3 Workers,
at least 2) loses Worker 2 to an eviction mid-run. The gang is not restarted: Workers 0 and 1 keep their
pods and train on as two ranks while Worker 2's new pod waits for a place (the node is closed to the job
meanwhile, as when a Spot node is gone and none has come back yet); once it runs, it joins them, three
ranks again, and the job succeeds. The status counts one replacement and no restart. With the node closed
to the end, the two finish the run on their own.

The node is closed by a cordon: the test owns the cluster (`cluster_wide`), so nothing else is placed
meanwhile. (Taking a label the job's pods select away and back raced the kubelet: the scheduler placed the
replacement on the label's return before the kubelet had seen it, and the kubelet rejected the pod.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from dtjob_trainer.checkpoint_files import CheckpointDirectory
from kubernetes import client

from dtjob.core.names import ATTEMPT_LABEL
from hack import images
from hack.examples import fresh_checkpoint_dir
from localcluster import Cluster
from localcluster.layout import REAL_NODE_NAME
from tests.support.ddp_digits import RESULT, result_line
from tests.support.jobs import Jobs, dump, events_of, evict, pod_story, status_of
from tests.support.operator import running_operator
from tests.support.paths import REPO
from tests.support.reads import wait_event, wait_log
from tests.support.waiting import wait_for

# torchrun's rendezvous and restarts on two busy cores: the gang restarted instead of taking its member
# back once (2026-11-28) with trainings beside it; run alone, as before the suite ran side by side.
pytestmark = [pytest.mark.cluster_wide, pytest.mark.quiet]

EXAMPLE = REPO / "examples" / "elastic-ddp-digits.yaml"
# Long enough that two ranks are still training when the replacement joins, whatever the machine's speed:
# at 300, with the DDP example's faster steps (settled buckets), two ranks once finished 77 s after the
# eviction in a full run, before a replacement the kubelet had rejected could be placed again.
EPOCHS = 400


def elastic_job(name: str, epochs: int = EPOCHS) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = f"/var/lib/dtjob-examples/{name}"
    pod_spec = job["spec"]["replicas"][0]["template"]["spec"]
    pod_spec["containers"][0]["args"] = ["--epochs", str(epochs), "--checkpoint-every", "20"]
    return job


def _cordon(core: client.CoreV1Api, node: str, unschedulable: bool) -> None:
    core.patch_node(node, {"spec": {"unschedulable": unschedulable}})


@contextmanager
def closed(core: client.CoreV1Api, node: str) -> Iterator[None]:
    """No room on the node for the job's new pods; its running pods stay."""
    _cordon(core, node, True)
    try:
        yield
    finally:
        _cordon(core, node, False)


def ranks_in(core: client.CoreV1Api, namespace: str, pod: str, size: int, after: str = "") -> str | None:
    """The pod's log once a worker of it joined a process group of `size` ranks after the line `after`
    (the runtime logs "... as rank R of N" on every join: torchrun starts its workers afresh each time)."""
    log = core.read_namespaced_pod_log(pod, namespace)
    tail = log.split(after, 1)[1] if after and after in log else log
    return log if re.search(rf"as rank \d+ of {size}\b", tail) else None


def test_an_evicted_worker_of_an_elastic_gang_is_replaced_while_the_others_train_on(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    images.ensure(cluster_c, images.TORCH_TRAINER)
    name = "elastic"
    job = elastic_job(name)
    checkpoints = CheckpointDirectory(fresh_checkpoint_dir(job), keep_last=1)
    worker = {index: f"{name}-worker-{index}" for index in range(3)}
    with running_operator(cluster_c, namespace):
        jobs.create(job)
        wait_for(checkpoints.latest_step, "a first checkpoint", timeout=300)
        uids = {p.metadata.name: p.metadata.uid for p in jobs.pods(name)}
        with closed(core, REAL_NODE_NAME):
            before = core.read_namespaced_pod_log(worker[0], namespace).splitlines()[-1]
            evict(core, namespace, worker[2])
            wait_for(
                lambda: (u := jobs.condition(name, "Unschedulable")) and u["status"] == "True",
                "the replacement to wait for a place",
                timeout=120,
            )
            survivors_log = wait_for(
                lambda: ranks_in(core, namespace, worker[0], 2, before), "two ranks to train on", timeout=180
            )
            status = jobs.get(name)["status"]
            assert status["restarts"]["replacements"] == 1 and status["attempt"] == 1, status
        last = survivors_log.splitlines()[-1]
        try:
            wait_for(lambda: ranks_in(core, namespace, worker[2], 3), "the replacement to join", timeout=180)
        except AssertionError as late:  # seen once in a full run: what the replacement shows says why
            story = pod_story(core, namespace, worker[2])
            raise AssertionError(f"{late}\n{story}\nstatus: {dump(status_of(jobs, name))}") from None
        wait_for(lambda: ranks_in(core, namespace, worker[0], 3, last), "three ranks again", timeout=60)
        # The survivors are the pods of the start; only Worker 2's is new, and all are of attempt 1.
        pods = {p.metadata.name: p for p in jobs.pods(name)}
        assert {n: pods[n].metadata.uid for n in (worker[0], worker[1])} == {
            n: uids[n] for n in (worker[0], worker[1])
        }
        assert pods[worker[2]].metadata.uid != uids[worker[2]]
        assert {p.metadata.labels[ATTEMPT_LABEL] for p in pods.values()} == {"1"}
        jobs.wait_condition(name, "Succeeded", timeout=600)
        wait_event(core, namespace, name, "MemberReplaced")

    status = jobs.get(name)["status"]
    assert (status["attempt"], status["restarts"]) == (
        1,
        {"failures": 0, "preemptions": 0, "total": 0, "replacements": 1},
    ), status
    assert status["elastic"]["minReplicas"] == 2 and status["elastic"]["maxReplicas"] == 3, status
    [replaced] = status["elastic"]["replaced"]
    assert (replaced["pod"], replaced["uid"], replaced["reason"]) == (worker[2], uids[worker[2]], "Preempted")
    reasons = [e.reason for e in events_of(core, namespace, name)]
    assert reasons.count("MemberReplaced") == 1 and "Preempted" not in reasons, reasons
    result = result_line(core, namespace, worker[0])
    assert result["test_accuracy"] >= 0.95, result


def test_an_elastic_gang_whose_lost_worker_finds_no_place_finishes_on_fewer(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    images.ensure(cluster_c, images.TORCH_TRAINER)
    name = "elastic-fewer"
    job = elastic_job(name, epochs=60)
    checkpoints = CheckpointDirectory(fresh_checkpoint_dir(job), keep_last=1)
    worker = {index: f"{name}-worker-{index}" for index in range(3)}
    with running_operator(cluster_c, namespace):
        jobs.create(job)
        wait_for(checkpoints.latest_step, "a first checkpoint", timeout=300)
        with closed(core, REAL_NODE_NAME):
            evict(core, namespace, worker[2])
            jobs.wait_condition(name, "Succeeded", timeout=600)
    status = jobs.get(name)["status"]
    assert (status["attempt"], status["restarts"]["total"], status["restarts"]["replacements"]) == (1, 0, 1)
    # Worker 0 trained to the end as one of two ranks; the replacement never ran.
    log = wait_log(core, namespace, worker[0], RESULT)  # the whole log: the result line comes last
    joins = re.findall(r"as rank \d+ of (\d+)", log)
    assert joins[0] == "3" and joins[-1] == "2", joins
    assert result_line(core, namespace, worker[0])["test_accuracy"] >= 0.95
