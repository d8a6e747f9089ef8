"""Properties of the pure core under generated worlds (Hypothesis).

A job of a generated shape and policy lives through a generated series of passes: before each pass, every
pod of the current and the previous attempts is in a generated state (absent, pending, running, exited
with a generated code, failed in its NCCL preflight, preempted, disrupted, deleting, on a node that is
Ready, NotReady or gone), the clock moves on a generated amount, and the status is what the last pass
wrote. At every pass:

- the same inputs give the same plan (determinism: the operator can redo any pass);
- the attempt, the restart counters (preflightFailures too) and createdAttempt never go down; total is
  failures + preemptions, and every restart moved the attempt;
- a live pod of the current attempt is deleted only when the job is finishing, suspending or past its
  deadline, never in the middle of a run;
- no pod is created for an attempt other than the current one, none twice, and never a pod that exists;
- a finished job stays finished.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtjob.names import ATTEMPT_LABEL
from dtjob.plan import Plan, reconcile, status_patch
from tests.support.builders import (
    NOW,
    SHARED_CHECKPOINTS,
    deleting,
    disrupted_while_running,
    exited,
    manifest,
    merged,
    node,
    pending,
    pods_of,
    preempted,
    preflight_ended,
    preflight_outcome,
    running,
)

SHAPES = [
    (("Worker", 1),),
    (("Worker", 3),),
    (("Master", 1), ("Worker", 2)),
]
TF_SHAPES = [(("Chief", 1), ("Worker", 1), ("PS", 1)), (("Worker", 2), ("Evaluator", 1))]
FINISHED = {"Succeeded", "Failed"}
NODES = ["gpu-node-1", "gpu-node-2"]


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    tensorflow = draw(st.booleans())
    shape = draw(st.sampled_from(TF_SHAPES if tensorflow else SHAPES))
    run_policy = {
        "restartPolicy": draw(st.sampled_from(["OnFailure", "ExitCode", "Never"])),
        "backoffLimit": draw(st.integers(0, 3)),
        "maxPreemptions": draw(st.integers(0, 3)),
        "failureSettleSeconds": draw(st.sampled_from([0, 5, 30])),
        "cleanPodPolicy": draw(st.sampled_from(["Running", "All", "None"])),
        "suspend": draw(st.booleans()),
    }
    if draw(st.booleans()):
        run_policy["activeDeadlineSeconds"] = draw(st.integers(30, 600))
    return manifest(
        *shape,
        framework="TensorFlow" if tensorflow else "PyTorch",
        checkpoint=SHARED_CHECKPOINTS,
        runPolicy=run_policy,
    )


POD_STATES = ["absent", "pending", "unschedulable", "running", "not-ready", "exit-0", "exit-1",
              "exit-137", "exit-200", "preempted", "evicting", "deleting", "preflight-failed"]  # fmt: skip


def pod_in(state: str, pod: dict[str, Any], node_name: str) -> dict[str, Any] | None:
    made: dict[str, Any] | None
    match state:
        case "absent":
            return None
        case "pending":
            made = pending(pod)
        case "unschedulable":
            made = pending(pod, unschedulable=True)
        case "running":
            made = running(pod)
        case "not-ready":
            made = running(pod, ready=False)
        case "preempted":
            made = preempted(pod)
        case "evicting":
            made = disrupted_while_running(pod, "EvictionByEvictionAPI")
        case "deleting":
            made = deleting(running(pod))
        case "preflight-failed":
            made = preflight_ended(
                pod, 3, preflight_outcome("PreflightFailed", busbw=2.1, transport="Socket")
            )
        case _:
            made = exited(pod, int(state.removeprefix("exit-")))
    if made.get("spec", {}).get("nodeName"):
        made["spec"]["nodeName"] = node_name
    return made


@st.composite
def worlds(
    draw: st.DrawFn, job: dict[str, Any], attempt: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job's pods of this attempt and the one before, and the nodes they are on."""
    children: list[dict[str, Any]] = []
    for generation in sorted({max(1, attempt - 1), attempt}):
        for pod in pods_of(job, generation).values():
            state = draw(st.sampled_from(POD_STATES))
            if (made := pod_in(state, pod, draw(st.sampled_from(NODES)))) is not None:
                children.append(made)
    nodes = [node(name, draw(st.sampled_from(["True", "False", "Unknown"]))) for name in NODES
             if draw(st.integers(0, 5)) > 0]  # fmt: skip
    return children, nodes


def counters(status: dict[str, Any]) -> tuple[int, int, int, int, int]:
    restarts = status.get("restarts") or {}
    return (status.get("attempt", 1), restarts.get("failures", 0), restarts.get("preemptions", 0),
            restarts.get("preflightFailures", 0), status.get("createdAttempt") or 0)  # fmt: skip


def check_pass(job: dict[str, Any], children: list[dict[str, Any]], plan: Plan) -> dict[str, Any]:
    old = job.get("status") or {}
    new = plan.status if plan.status is not None else old
    attempt = old.get("attempt", 1)
    assert all(a <= b for a, b in zip(counters(old), counters(new), strict=True)), (old, new)
    restarts = new.get("restarts") or {}
    assert restarts.get("total", 0) == restarts.get("failures", 0) + restarts.get("preemptions", 0)
    assert new.get("attempt", 1) - 1 >= restarts.get("total", 0), "a restart that did not move the attempt"
    if old.get("phase") in FINISHED:
        assert new.get("phase") == old.get("phase"), "a finished job stays finished"

    live = {c["metadata"]["uid"]: c for c in children if not c["metadata"].get("deletionTimestamp")}
    for delete in plan.delete:
        pod = live.get(delete.uid or "")
        if pod is not None and pod["metadata"]["labels"][ATTEMPT_LABEL] == str(attempt):
            assert new.get("phase") in FINISHED | {"Suspended"} or (
                (job["spec"].get("runPolicy") or {}).get("suspend")
            ), f"deleted {delete.name} of the current attempt while the job is {new.get('phase')}"

    names = [p["metadata"]["name"] for p in plan.create]
    assert len(names) == len(set(names)), "a pod created twice in one pass"
    present = {
        c["metadata"]["name"] for c in children if c["metadata"]["labels"][ATTEMPT_LABEL] == str(attempt)
    }
    for pod in plan.create:
        assert pod["metadata"]["labels"][ATTEMPT_LABEL] == str(attempt), "a pod for another attempt"
        assert pod["metadata"]["name"] not in present, f"{pod['metadata']['name']} exists already"
    if plan.create:
        assert new.get("attempt", 1) == attempt and new.get("phase") not in FINISHED | {"Suspended"}
    return new


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(), data=st.data())
def test_a_job_through_generated_passes_keeps_the_cores_promises(
    job: dict[str, Any], data: st.DataObject
) -> None:
    now = NOW
    for _ in range(data.draw(st.integers(1, 6), label="passes")):
        attempt = (job.get("status") or {}).get("attempt", 1)
        children, nodes = data.draw(worlds(job, attempt), label="world")
        now += timedelta(seconds=data.draw(st.sampled_from([0, 1, 10, 40, 400]), label="seconds"))
        plan = reconcile(copy.deepcopy(job), copy.deepcopy(children), now, copy.deepcopy(nodes))
        again = reconcile(copy.deepcopy(job), copy.deepcopy(children), now, copy.deepcopy(nodes))
        assert again == plan, "the same inputs gave another plan"
        stored = job.get("status") or {}
        job = {**job, "status": merged(stored, status_patch(stored, check_pass(job, children, plan)))}
        assert job["status"] == (plan.status or stored), "the stored status is not the one the pass decided"


# What a status holds: no nulls (dump_status leaves them out).
JSON = st.recursive(
    st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=10,
)
STATUSES = st.dictionaries(st.sampled_from("abcd"), JSON, max_size=4)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stored=STATUSES, new=STATUSES)
def test_the_status_patch_leaves_exactly_the_decided_status_on_the_server(
    stored: dict[str, Any], new: dict[str, Any]
) -> None:
    assert merged(stored, status_patch(stored, new)) == new
