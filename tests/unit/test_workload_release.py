"""dtjob's finalizer on its Workloads (pure): a Workload being deleted keeps its quota counted while a pod
of its job still holds resources, and lets go once none does, or when it holds no quota or is finished."""

from __future__ import annotations

from typing import Any

from dtjob.core import kueue
from dtjob.core.workload_release import finalizer_release, pods_holding_resources
from tests.support.builders import exited, pods_of, running
from tests.support.kueue import QUEUED, workload

ADMITTED = (("QuotaReserved", "True"), ("Admitted", "True"))


def deleting(stored: dict[str, Any]) -> dict[str, Any]:
    meta = {**stored["metadata"], "deletionTimestamp": "2030-01-01T12:00:00Z"}
    return {**stored, "metadata": meta}


def gang(*ends: int | None) -> list[dict[str, Any]]:
    """The job's pods: running (None) or exited with the code given, in rank order."""
    pods = list(pods_of(QUEUED).values())
    return [running(p) if end is None else exited(p, end) for p, end in zip(pods, ends, strict=False)]


def test_every_workload_dtjob_makes_carries_the_finalizer() -> None:
    assert workload()["metadata"]["finalizers"] == [kueue.RESOURCE_IN_USE]


def test_a_workload_not_being_deleted_keeps_its_finalizer() -> None:
    assert finalizer_release(workload(*ADMITTED, admission=True), []) is None


def test_an_admitted_workload_being_deleted_waits_for_the_last_pod_that_holds_resources() -> None:
    admitted = deleting(workload(*ADMITTED, admission=True))
    assert finalizer_release(admitted, gang(0, None, 1)) is None  # one trainer still saving
    assert pods_holding_resources(admitted, gang(0, None, 1)) == ["mnist-worker-0"]
    released = finalizer_release(admitted, gang(0, 1, 1))
    assert released == {
        "metadata": {"name": admitted["metadata"]["name"], "resourceVersion": "7", "finalizers": []}
    }
    assert finalizer_release(admitted, []) == released  # every pod gone


def test_a_pod_of_another_job_of_the_same_name_holds_nothing_of_this_workload() -> None:
    admitted = deleting(workload(*ADMITTED, admission=True))
    namesake = running(next(iter(pods_of(QUEUED).values())))
    namesake["metadata"]["ownerReferences"] = [{**namesake["metadata"]["ownerReferences"][0], "uid": "other"}]
    assert finalizer_release(admitted, [namesake]) is not None


def test_a_workload_that_holds_no_quota_or_is_finished_lets_go_at_once() -> None:
    assert finalizer_release(deleting(workload(("QuotaReserved", "False"))), gang(None, None, None))
    finished = workload(*ADMITTED, ("Finished", "True"), admission=True)
    assert finalizer_release(deleting(finished), gang(None, None, None))


def test_only_dtjobs_finalizer_comes_off() -> None:
    admitted = deleting(workload(*ADMITTED, admission=True))
    admitted["metadata"]["finalizers"] = ["example.com/keep", kueue.RESOURCE_IN_USE]
    assert finalizer_release(admitted, [])["metadata"]["finalizers"] == ["example.com/keep"]  # type: ignore[index]
    admitted["metadata"]["finalizers"] = ["example.com/keep"]
    assert finalizer_release(admitted, []) is None
