"""Argo CD's health check before the operator has written a status that says anything (the statuses it
writes are judged against the real operator in tests/integration/test_argocd_health.py)."""

from __future__ import annotations

from tests.support.argocd_health import health

JOB = {"apiVersion": "training.dtjob.io/v1alpha1", "kind": "DistributedTrainingJob",
       "metadata": {"name": "ddp", "generation": 2}}  # fmt: skip


def test_a_job_the_operator_has_not_taken_yet_is_progressing() -> None:
    assert health(JOB) == ("Progressing", "Waiting for the dtjob operator to take the job")


def test_a_finished_job_whose_spec_changed_since_is_progressing_until_the_operator_saw_it() -> None:
    succeeded = {"type": "Succeeded", "status": "True", "reason": "RankZeroSucceeded", "message": "done",
                 "lastTransitionTime": "2026-11-25T10:00:00Z"}  # fmt: skip
    status = {"phase": "Succeeded", "conditions": [succeeded], "observedGeneration": 1}
    assert health({**JOB, "status": status}) == (
        "Progressing",
        "Waiting for the dtjob operator to see generation 2",
    )
    assert health({**JOB, "status": {**status, "observedGeneration": 2}}) == ("Healthy", "done")
