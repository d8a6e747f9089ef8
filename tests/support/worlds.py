"""Generated worlds a job lives through, pass after pass, for the core's properties
(tests/unit/test_reconcile_properties.py) and the record of its plans (hack/plan_corpus.py).

A job of a chosen kind (Recreate or InPlace with hot spares, elastic PyTorch, in a Kueue queue or not,
with hang and slow-rank detection or not) lives through a chosen series of passes: before each pass,
every pod of the current and the previous attempts (as rendered, and as earlier passes created and
relabelled them: spares too) is in a chosen state (absent, pending, running, exited with a chosen code,
failed in its NCCL preflight, preempted, disrupted, deleting, on a node that is Ready, NotReady or gone),
the trainers' progress reports are a chosen ledger (advancing, stalled, one rank slow), the job's Workload
is in a chosen Kueue state (pending, admitted, evicted, finished), the clock moves on a chosen amount,
and the status is what the last pass wrote. The choices are Hypothesis's draws or a seeded random walk.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from dtjob.core import kueue
from dtjob.core.names import ATTEMPT_LABEL
from dtjob.core.plan import Plan
from dtjob.core.progress import Ledger, Report, received
from dtjob.core.reconcile import reconcile
from dtjob.core.status.codec import status_patch
from dtjob.core.world import Needs
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
    template,
)
from tests.support.plan import world_of

SHAPES = [
    (("Worker", 1),),
    (("Worker", 3),),
    (("Master", 1), ("Worker", 2)),
]
TF_SHAPES = [(("Chief", 1), ("Worker", 1), ("PS", 1)), (("Worker", 2), ("Evaluator", 1))]
NODES = ["gpu-node-1", "gpu-node-2"]


GANGS = ["fixed", "in place", "elastic", "queued", "watched"]


T = TypeVar("T")
Choose = Callable[[Sequence[T]], T]
"""Picks one of the options: Hypothesis's draw (shrinking a failure to its simplest world) or a seeded
uniform random walk (test_the_generated_worlds_reach_every_path...)."""


BOTH = (False, True)


def job_of(choose: Choose[Any], kind: str | None = None) -> dict[str, Any]:
    """A job of a chosen kind (GANGS: a fixed gang, InPlace with a hot spare or none, elastic, any of
    them in a Kueue queue or watched for hangs and slow ranks with no deadline), or of `kind`."""
    queued = kind == "queued" or (kind is None and choose(BOTH))
    watched = kind == "watched" or (kind is None and choose(BOTH))
    tensorflow = kind in (None, "fixed", "queued", "watched") and choose(BOTH)
    shape = choose(TF_SHAPES if tensorflow else SHAPES)
    kinds = ["fixed"] if tensorflow else ["fixed", "in place", "elastic"]
    gang = kind if kind in kinds else choose(kinds)
    replicas: list[tuple[str, int] | dict[str, Any]] = list(shape)
    extra: dict[str, Any] = {}
    if gang == "in place":
        spares = choose([1, 0])
        replicas = [{"role": r, "count": n, "template": template(), **({"spares": spares} if r == "Worker" else {})}
                    for r, n in shape]  # fmt: skip
    if gang == "elastic":
        replicas = [("Worker", choose([2, 3]))]
        extra["torch"] = {"elastic": {"minReplicas": 1}}
    run_policy = {
        "restartPolicy": choose(["OnFailure", "ExitCode", "Never"]),
        "backoffLimit": choose([3, 1, 0]),
        "maxPreemptions": choose([3, 1, 0]),
        "failureSettleSeconds": choose([0, 5, 30]),
        "cleanPodPolicy": choose(["Running", "All", "None"]),
        "suspend": choose([False, False, False, True]),
    }
    if gang == "in place":
        run_policy["restartStrategy"] = "InPlace"
    if kind != "watched" and choose(BOTH):
        run_policy["activeDeadlineSeconds"] = choose([30, 100, 600])
    if watched:
        run_policy["progressDeadlineSeconds"] = choose([30, 60])
        run_policy["maxHangRestarts"] = choose([2, 0])
        if choose(BOTH):
            run_policy["slowRankRestartSeconds"] = 60
    job = manifest(
        *replicas,
        framework="TensorFlow" if tensorflow else "PyTorch",
        checkpoint=SHARED_CHECKPOINTS,
        runPolicy=run_policy,
        **extra,
    )
    if queued:
        job["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a-gpus"}
    return job


POD_STATES = ["absent", "pending", "unschedulable", "running", "not-ready", "exit-0", "exit-1",
              "exit-137", "exit-200", "preempted", "evicting", "deleting", "preflight-failed"]  # fmt: skip


# Weighted towards a gang that runs, so that passes reach what needs every member running (hangs, slow
# ranks, spares taking ranks), as well as the ways it breaks.
LIKELY_POD_STATES = [*POD_STATES, *["running"] * 8, *["absent"] * 3, "pending"]


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


@dataclass
class World:
    """What the passes have made so far, beyond the job: the pods they created (as relabelled since),
    the trainers' reports and the job's Workload as Kueue left it."""

    created: dict[str, dict[str, Any]] = field(default_factory=dict)
    ledger: Ledger | None = None
    workload: dict[str, Any] | None = None
    states: dict[str, str] = field(default_factory=dict)
    """Each pod's (by uid) and the Workload's last drawn state: most passes keep it, so that a gang
    runs, stalls or waits over several passes."""

    def exists(self, choose: Choose[Any], pod: dict[str, Any]) -> bool:
        """Whether the pod is there: one a pass created is; one no pass created only where a leader
        taken away made it unrecorded (drawn once)."""
        uid = pod["metadata"]["uid"]
        if uid not in self.states:
            made = uid.startswith("made-") or choose([False, False, False, True])
            self.states[uid] = "new" if made else "absent"
        return self.states[uid] != "absent"

    def state(self, choose: Choose[Any], key: str, states: list[str]) -> str:
        if self.states.get(key, "new") == "new" or choose([False, False, True]):
            self.states[key] = choose(states)
        return self.states[key]

    def pods(self, job: dict[str, Any], generation: int, current: bool) -> list[dict[str, Any]]:
        """The attempt's pods: as rendered (a leader taken away after creating them never recorded
        it), or as a pass created them; the spares (of no attempt) with the current one's."""
        of: dict[str, dict[str, Any]] = pods_of(job, generation)
        for name, pod in self.created.items():
            made = pod["metadata"]["labels"].get(ATTEMPT_LABEL)
            if made == str(generation) or (made is None and current):
                of[name] = pod
        return list(of.values())

    def after(self, plan: Plan) -> None:
        for pod in plan.create:
            made = copy.deepcopy(pod)
            made["metadata"]["uid"] = f"made-{pod['metadata']['name']}-{len(self.created)}"
            made["metadata"]["creationTimestamp"] = "2030-01-01T11:59:00Z"
            self.created[pod["metadata"]["name"]] = made
        for patch in plan.relabel:
            if (pod := self.created.get(patch.name)) is not None:
                labels = {**pod["metadata"]["labels"], **patch.labels}
                pod["metadata"]["labels"] = {k: v for k, v in labels.items() if v is not None}
                pod["metadata"]["annotations"] = {
                    **(pod["metadata"].get("annotations") or {}),
                    **patch.annotations,
                }
        if plan.workload is not None and self.workload is None:
            self.workload = {
                **plan.workload,
                "metadata": {**plan.workload["metadata"], "uid": "w-1", "resourceVersion": "1"},
            }
        if self.workload is not None and plan.workload_spec is not None:
            annotations = plan.workload_spec["metadata"].get("annotations") or {}
            meta = self.workload["metadata"]
            self.workload = {
                **self.workload,
                "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), **annotations}},
                "spec": {**self.workload["spec"], **plan.workload_spec["spec"]},
            }


WORKLOAD_STATES = ["pending", "admitted", "admitted", "evicted", "finished"]


def workload_in(state: str, stored: dict[str, Any]) -> dict[str, Any]:
    """The Workload as Kueue leaves it in `state`."""
    conditions = {
        "pending": [("QuotaReserved", "False")],
        "admitted": [("QuotaReserved", "True"), ("Admitted", "True")],
        "evicted": [("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True")],
        "finished": [("Finished", "True")],
    }[state]
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "reason": t, "message": f"{t} is {s}", "lastTransitionTime": "x"}
            for t, s in conditions
        ]
    }
    if state in ("admitted", "evicted"):
        status["admission"] = {
            "clusterQueue": "gpus",
            "podSetAssignments": [
                {"name": ps["name"], "flavors": {"cpu": "h100"}, "count": ps["count"]}
                for ps in stored["spec"]["podSets"]
            ],
        }
    return {**stored, "status": status}


FLAVORS = {"h100": {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"pool": "h100"}}}}
REPORTS = ["advancing", "stalled", "slow", "none"]


def ledger_after(
    how: str, ledger: Ledger | None, attempt: int, pods: list[str], now: datetime
) -> Ledger | None:
    """The ledger once this pass's reports came in: the gang's step advancing, stalled, or advancing with
    rank 0's own step time far above its peers' (a slow rank)."""
    if how == "none":
        return ledger
    previous = {
        name: r.report.step
        for name, r in (ledger.pods.items() if ledger and ledger.attempt == attempt else ())
    }
    for rank, pod in enumerate(pods):
        step = previous.get(pod, 0) + (how != "stalled") * 10
        own = 3.0 if how == "slow" and rank == 0 else 0.5
        report = Report(step=step, step_seconds=1.0, own_step_seconds=own, last_checkpoint_step=step // 2)
        ledger = received(ledger, attempt, pod, report, now) or ledger
    return ledger


# What a calm pass brings to running: a pod starting (or one no pass created, found as it is).
STARTING = {"new", "pending", "unschedulable", "not-ready"}


def worlds(
    choose: Choose[Any], job: dict[str, Any], world: World, now: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job's pods of this attempt and the one before, and the nodes they are on; the ledger and the
    Workload moved on in `world`."""
    attempt = (job.get("status") or {}).get("attempt", 1)
    children: list[dict[str, Any]] = []
    # Most passes are calm: the current attempt's starting pods come up and run on Ready nodes. In the
    # others one thing happens to one of them (else something breaking in nearly every pass would leave
    # hangs, slow ranks and spares unreached). The previous attempt's pods are on their way out.
    calm = choose([True, True, True, False])
    current = [p for p in world.pods(job, attempt, current=True) if world.exists(choose, p)]
    struck = choose([p["metadata"]["uid"] for p in current]) if current and not calm else None
    for pod in current:
        uid = pod["metadata"]["uid"]
        if uid == struck:
            world.states[uid] = choose(POD_STATES)
        elif world.states[uid] == "new" or (calm and world.states[uid] in STARTING):
            world.states[uid] = "running"
        if (made := pod_in(world.states[uid], pod, choose(NODES))) is not None:
            children.append(made)
    if attempt > 1:
        for pod in world.pods(job, attempt - 1, current=False):
            if world.exists(choose, pod):
                state = world.state(choose, pod["metadata"]["uid"], LIKELY_POD_STATES)
                if (made := pod_in(state, pod, choose(NODES))) is not None:
                    children.append(made)
    nodes = [node(name, "True" if calm else choose(["True", "False", "Unknown"]))
             for name in NODES if calm or choose([True] * 5 + [False])]  # fmt: skip
    live = [c["metadata"]["name"] for c in children
            if c["metadata"]["labels"].get(ATTEMPT_LABEL) == str(attempt) and c["status"].get("phase") == "Running"]  # fmt: skip
    world.ledger = ledger_after(world.state(choose, "reports", REPORTS), world.ledger, attempt, live, now)
    if world.workload is not None:
        world.workload = workload_in(world.state(choose, "workload", WORKLOAD_STATES), world.workload)
    return children, nodes


@dataclass(frozen=True)
class Pass:
    """One pass's inputs, the plan the core made of them, and what it asked to read first."""

    job: dict[str, Any]
    children: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    now: datetime
    workload: dict[str, Any] | None
    ledger: Ledger | None
    plan: Plan
    asked: Needs | None = None


def plan_of(job: dict[str, Any], children: list[dict[str, Any]], nodes: list[dict[str, Any]], now: datetime,
            workload: dict[str, Any] | None, ledger: Ledger | None) -> tuple[Plan, Needs | None]:  # fmt: skip
    """The core's one pass (on copies: the inputs are left as they were), and what it asked to read first.
    The children are the world's truth: a listing the core asks for finds them again. The world holds no
    GKE Network objects nor priority classes: a pass that needs them plans nothing."""
    world = world_of(
        copy.deepcopy(job), copy.deepcopy(children), now, copy.deepcopy(nodes),
        workload=copy.deepcopy(workload), flavors=FLAVORS, ledger=ledger, listed=False,
    )  # fmt: skip
    outcome = reconcile(world)
    if isinstance(outcome, Needs) and outcome.listing and not (outcome.networks or outcome.priority):
        again = reconcile(replace(world, listed=True))
        return (again, outcome) if isinstance(again, Plan) else (Plan(), outcome)
    return (Plan(), outcome) if isinstance(outcome, Needs) else (outcome, None)


def passes(job: dict[str, Any], choose: Choose[Any]) -> Iterator[Pass]:
    """The job through chosen passes; after each, the world as the plan left it and the job with the
    status the plan decided (as the merge patch the operator sends lands)."""
    now = NOW
    world = World()
    for _ in range(choose(range(3, 11))):
        now += timedelta(seconds=choose([40, 10, 0, 1, 400]))
        children, nodes = worlds(choose, job, world, now)
        workload = copy.deepcopy(world.workload)
        plan, asked = plan_of(job, children, nodes, now, workload, world.ledger)
        yield Pass(job, children, nodes, now, workload, world.ledger, plan, asked)
        world.after(plan)
        stored = job.get("status") or {}
        job = {**job, "status": merged(stored, status_patch(stored, plan.status or stored))}
