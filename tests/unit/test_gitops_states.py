"""The captured jobs of tests/data/gitops, which the GitOps health checks are tested against: what the
operator's core writes today, every phase and every condition users gate on among them, each one a row
of docs/gitops.md's table."""

from __future__ import annotations

from dtjob.api import ConditionType, Phase
from dtjob.core.decide import Reason
from dtjob.core.status.codec import dump_status, read_status
from tests.support.gitops_states import STATES, STATES_DIR, as_file, file_of, read
from tests.support.gitops_table import NO_PHASE, PHASE_COLUMN, health_table

# The conditions users gate on (docs/gitops.md), each True in some captured job.
GATED = (ConditionType.ADMITTED, ConditionType.UNSCHEDULABLE, ConditionType.SLOW_RANK, ConditionType.QUEUED)


def test_each_captured_file_is_what_the_core_writes_today() -> None:
    """Regenerate with `python -m tests.support.gitops_states` when a status change is meant."""
    assert sorted(p.stem for p in STATES_DIR.glob("*.yaml")) == sorted(STATES)
    for state in STATES:
        assert file_of(state).read_text() == as_file(state), f"{file_of(state)} is stale: regenerate it"


def test_every_phase_and_every_gated_condition_is_captured_and_reads_back_as_the_model() -> None:
    statuses = {state: read_status(read(state).get("status")) for state in STATES}
    assert {s.phase for s in statuses.values()} == {*Phase, None}
    for type_ in GATED:
        assert any(s.is_true(type_) for s in statuses.values()), type_
    restarting = [
        s.condition(ConditionType.RESTARTING)
        for s in statuses.values()
        if s.is_true(ConditionType.RESTARTING)
    ]
    assert {c.reason for c in restarting if c is not None} >= {Reason.SETTLING, Reason.POD_FAILED}
    for state in STATES:  # every field is one the status model knows, as it writes it
        job = read(state)
        if "status" in job:
            assert dump_status(read_status(job["status"])) == job["status"], state


def test_the_docs_table_has_a_row_for_each_captured_job_with_its_phase() -> None:
    rows = health_table()
    assert [row.state for row in rows] == list(STATES)
    for row in rows:
        assert read(row.state)["metadata"]["name"] == row.state  # the kubectl wait test finds it so
        assert row.cells[PHASE_COLUMN] == (read(row.state).get("status") or {}).get("phase", NO_PHASE), (
            row.state
        )
