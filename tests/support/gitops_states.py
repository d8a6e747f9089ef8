"""Captured DistributedTrainingJobs, one in each state a GitOps tool has to judge (docs/gitops.md): each is
brought there pass by pass by the real core (reconcile, as the operator runs it), its status stored as the
operator's merge patch leaves it. tests/data/gitops/<state>.yaml holds them for the tools that read files
(the Go test of Flux's kstatus and CEL, `kubectl wait`); tests/unit/test_gitops_states.py keeps the files
equal to what this module makes now. Regenerate them with

    PYTHONPATH=.:operator python -m tests.support.gitops_states
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import yaml

from tests.support.builders import (
    NOW,
    SHARED_CHECKPOINTS,
    exited,
    manifest,
    merged,
    pending,
    pods_of,
    running,
    service_of,
)
from tests.support.kueue import QUEUED, workload
from tests.support.paths import REPO
from tests.support.plan import after, plan_for
from tests.support.progress import reports

STATES_DIR: Final = REPO / "tests" / "data" / "gitops"
Job = dict[str, Any]
# The change a user commits to a running job (a GitOps pipeline suspending it): the suspended job's
# generation 2, and the spec-changed one's before the operator saw it. The spec before it: BEFORE_CHANGE.
USER_CHANGE: Final = {"spec": {"runPolicy": {"suspend": True}}}
BEFORE_CHANGE: Final = {"spec": {"runPolicy": {"suspend": False}}}
# A Kueue flavor and LocalQueue -> ClusterQueue route, as the operator reads them.
FLAVORS: Final = {"h100": {"metadata": {"name": "h100"},
                           "spec": {"nodeLabels": {"cloud.google.com/gke-nodepool": "h100-pool"}}}}  # fmt: skip
ROUTES: Final = {"team-a-gpus": "gpus"}


def _at(seconds: int) -> datetime:
    return NOW + timedelta(seconds=seconds)


def _job(name: str, **spec: Any) -> Job:
    return manifest(("Master", 1), ("Worker", 1), name=name, checkpoint=SHARED_CHECKPOINTS, **spec)


def _passes(job: Job, *worlds: tuple[list[Job], dict[str, Any]]) -> Job:
    """`job` after one pass in each world (the children the operator lists, and what else it reads), a
    pass every 10 s; the first pass sees no child."""
    job = after(job, plan_for(job, [], NOW))
    for i, (children, facts) in enumerate(worlds, start=1):
        job = after(job, plan_for(job, children, _at(10 * i), **facts))
    return job


def _pods(job: Job, *states: Callable[[Job], Job], attempt: int = 1) -> list[Job]:
    """The job's Service and its pods (Master first), each in the state its function puts it in."""
    pods = list(pods_of(job, attempt).values())
    return [service_of(job), *(state(pod) for state, pod in zip(states, pods, strict=True))]


def _gang(job: Job, *states: Callable[[Job], Job]) -> Job:
    return _passes(job, (_pods(job, *states), {}))


def _broken(job: Job) -> Job:
    """The worker failed and the gang was watched for runPolicy.failureSettleSeconds (the default 30 s)
    with no disruption in sight: the failure is charged (a pass at 10 s sees it, the next at 50 s)."""
    gang = _pods(job, running, _failing)
    return _passes(job, (gang, {}), (gang, {}), (gang, {}), (gang, {}), (gang, {}))


def _failing(pod: Job) -> Job:
    return exited(
        pod, 1, message="Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory"
    )


def _queued() -> Job:
    job = {**QUEUED, "metadata": {**QUEUED["metadata"], "name": "queued"}}
    waiting = workload(("QuotaReserved", "False"))
    return _passes(job, ([], {"workload": waiting, "flavors": FLAVORS, "routes": ROUTES}))


def _admitted() -> Job:
    job = {**QUEUED, "metadata": {**QUEUED["metadata"], "name": "admitted"}}
    kueue = {"workload": workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True),
             "flavors": FLAVORS, "routes": ROUTES}  # fmt: skip
    queued = {**kueue, "workload": workload(("QuotaReserved", "False"))}
    pods = list(pods_of(after(job, plan_for(job, [], NOW)), 1).values())
    gang = [service_of(job), *(running(p) for p in pods)]
    return _passes(job, ([], queued), ([], kueue), (gang, kueue))


def _running() -> Job:
    job = _job("running")
    ledger = reports(
        (
            5,
            "running-master-0",
            {"step": 120, "totalSteps": 1000, "epoch": 1, "loss": 0.42, "stepSeconds": 0.5},
        ),
        (5, "running-worker-0", {"step": 120, "totalSteps": 1000}),
    )
    return _passes(job, (_pods(job, running, running), {"ledger": ledger}))


def _slow_rank() -> Job:
    job = _job("slow-rank")
    ledger = reports(
        (5, "slow-rank-master-0", {"step": 40, "ownStepSeconds": 0.004}),
        (5, "slow-rank-worker-0", {"step": 40, "ownStepSeconds": 0.05}),
    )
    return _passes(job, (_pods(job, running, running), {"ledger": ledger}))


def _suspended() -> Job:
    job = _gang(_job("suspended"), running, running)
    job = merged(job, {**USER_CHANGE, "metadata": {"generation": 2}})
    return after(job, plan_for(job, _pods(job, running, running), _at(20)))


def _spec_changed() -> Job:
    """Running, then suspended by a commit the operator has not seen yet (status.observedGeneration 1)."""
    job = _gang(_job("spec-changed"), running, running)
    return merged(job, {**USER_CHANGE, "metadata": {"generation": 2}})


def _new() -> Job:
    return _job("new")


def _invalid() -> Job:
    job = _job("invalid", accelerator={"type": "nvidia-l4", "count": 1}, torch={"nprocPerNode": 4})
    return _passes(job)


STATES: Final[dict[str, Callable[[], Job]]] = {
    "new": _new,
    "pending": lambda: _gang(_job("pending"), pending, running),
    "unschedulable": lambda: _gang(
        _job("unschedulable"), running, lambda pod: pending(pod, unschedulable=True)
    ),
    "queued": _queued,
    "admitted": _admitted,
    "running": _running,
    "slow-rank": _slow_rank,
    "settling": lambda: _gang(_job("settling", runPolicy={"failureSettleSeconds": 600}), running, _failing),
    "restarting": lambda: _broken(_job("restarting")),
    "suspended": _suspended,
    "spec-changed": _spec_changed,
    "succeeded": lambda: _gang(_job("succeeded"), lambda pod: exited(pod, 0), running),
    "failed": lambda: _broken(_job("failed", runPolicy={"backoffLimit": 0})),
    "invalid": _invalid,
}


def captured(state: str) -> Job:
    """The state's job as the apiserver returns it (a deep copy: callers may change it)."""
    return copy.deepcopy(STATES[state]())


def file_of(state: str) -> Path:
    return STATES_DIR / f"{state}.yaml"


def as_file(state: str) -> str:
    header = (
        f"# {state}: generated by tests/support/gitops_states.py from the operator's core; do not edit.\n"
    )
    return header + yaml.safe_dump(captured(state), sort_keys=False, width=120)


def read(state: str) -> Job:
    loaded: Job = yaml.safe_load(file_of(state).read_text())
    return loaded


if __name__ == "__main__":
    STATES_DIR.mkdir(parents=True, exist_ok=True)
    for name in STATES:
        file_of(name).write_text(as_file(name))
        print(f"wrote {file_of(name).relative_to(REPO)}")
