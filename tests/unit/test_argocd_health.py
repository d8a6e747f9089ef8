"""Argo CD's health check: before the operator has written a status that says anything, and over every
captured state of docs/gitops.md's table (what the operator's core writes; the statuses are also judged
against the real operator in tests/integration/test_argocd_health.py)."""

from __future__ import annotations

import pytest

from tests.support.argocd_health import health
from tests.support.gitops_states import read
from tests.support.gitops_table import ARGO_CD_COLUMN, Row, health_table

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


@pytest.mark.parametrize("row", health_table(), ids=lambda row: row.state)
def test_each_captured_state_gets_the_health_the_docs_table_says(row: Row) -> None:
    assert health(read(row.state))[0] == row.cells[ARGO_CD_COLUMN]


def test_a_queued_job_says_where_it_waits_and_a_running_one_how_far_it_got() -> None:
    assert health(read("queued")) == (
        "Progressing",
        "Queued (attempt 1): waiting in LocalQueue team-a-gpus (ClusterQueue gpus) for quota: QuotaReserved is False",
    )
    assert (
        health(read("running"))[1] == "Running (attempt 1): 2/2 pods of attempt 1 are running; step 120/1000"
    )
