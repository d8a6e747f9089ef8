"""The net's judgement (hack/flake_net.py) and the pace's arithmetic (tests/support/pace.py), as pure
functions; tests/suite/test_net.py runs the net for real."""

from __future__ import annotations

from datetime import date

import pytest

from hack import flake_net
from hack.flake_net import Flake, LedgerEntry
from tests.support.pace import DEADLINE_ENV, liveness_timeout, pace_of


def entry(outcome: str, started: float = 0, seconds: float = 1, why: str = "") -> dict[str, object]:
    return {"outcome": outcome, "started": started, "seconds": seconds, "why": why, "tier": "no cluster"}


LEDGER = """# Flakes
| test | date | cause | fix |
|---|---|---|---|
| `tests/e2e/test_a.py::test_one` | 2026-11-28 | an Event read once | `af98bae` |
| `tests/e2e/test_b.py::test_two` | 2026-12-01 | not yet found: timed out | open |
| `tests/e2e/test_c.py::test_three` | 2026-12-01 | being looked at |  |
"""


def test_the_ledger_reads_each_row_and_an_empty_or_open_fix_is_open() -> None:
    ledger = flake_net.read_ledger(LEDGER)
    assert set(ledger) == {
        "tests/e2e/test_a.py::test_one",
        "tests/e2e/test_b.py::test_two",
        "tests/e2e/test_c.py::test_three",
    }
    assert [e.open for e in ledger.values()] == [False, True, True]
    assert ledger["tests/e2e/test_a.py::test_one"] == LedgerEntry(
        "tests/e2e/test_a.py::test_one", "2026-11-28", "an Event read once", "`af98bae`"
    )


def test_a_new_flake_is_ledgered_open_and_reads_back_so() -> None:
    row = flake_net.ledger_row(
        Flake("tests/x.py::test_y", "call: timed out | after 30s", ()), date(2026, 12, 2)
    )
    assert row == "| `tests/x.py::test_y` | 2026-12-02 | not yet found: call: timed out / after 30s | open |"
    assert flake_net.read_ledger(row)["tests/x.py::test_y"].open


def test_overlapping_tests_are_those_whose_spans_cross_the_flakes_the_longest_first() -> None:
    tests = {
        "flake": entry("failed", started=100, seconds=50),
        "before": entry("passed", started=0, seconds=100),  # ends as it starts: no overlap
        "short": entry("passed", started=140, seconds=5),
        "long": entry("passed", started=90, seconds=200),
        "unstarted": {"outcome": "passed", "seconds": 3, "tier": "no cluster"},
    }
    assert flake_net.overlapping(tests, "flake") == ("long", "short")


def test_failures_that_pass_alone_are_flaky_and_those_that_fail_alone_failed() -> None:
    tests = {
        "a": entry("passed"),
        "b": entry("failed", why="timed out"),
        "c": entry("error", why="setup: boom"),
    }
    rerun: list[str] = []

    def passes_alone(nodeid: str) -> bool:
        rerun.append(nodeid)
        return nodeid == "b"

    outcome = flake_net.judge(tests, passes_alone, {})
    assert rerun == ["b", "c"]
    assert outcome.line() == "1 passed, 1 flaky, 1 failed" and not outcome.green
    assert [f.test for f in outcome.flaky] == ["b"] and outcome.failed[0].verdict == "failed again, alone"


def test_more_failures_than_the_net_holds_are_not_rerun_and_a_dirty_test_never_is() -> None:
    many = {f"t{i}": entry("failed") for i in range(flake_net.MAX_RERUNS + 1)}
    outcome = flake_net.judge(many, lambda n: (_ for _ in ()).throw(AssertionError("rerun")), {})
    assert len(outcome.failed) == flake_net.MAX_RERUNS + 1 and "not rerun" in outcome.failed[0].verdict
    dirty = {"d": entry("error", why="teardown: hygiene check: node kwok-1 schedulable")}
    outcome = flake_net.judge(dirty, lambda n: True, {})
    assert outcome.failed[0].verdict == "left the cluster dirty: never rerun"


def test_a_ledgered_flake_fails_the_gate_while_open_and_is_reported_recurring_once_fixed() -> None:
    ledger = flake_net.read_ledger(LEDGER)
    tests = {
        "tests/e2e/test_a.py::test_one": entry("failed"),
        "tests/e2e/test_b.py::test_two": entry("failed"),
    }
    outcome = flake_net.judge(tests, lambda n: True, ledger)
    assert [f.test for f in outcome.failed] == ["tests/e2e/test_b.py::test_two"]
    assert outcome.flaky[0].recurred_after_fix == "af98bae"
    assert not outcome.green


def test_a_liveness_wait_scales_with_the_pace_within_the_runs_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    assert liveness_timeout(30, pace=2.5) == 75
    assert liveness_timeout(30, pace=0.5) == 30  # never shorter than chosen
    monkeypatch.setenv(DEADLINE_ENV, "1000")
    assert liveness_timeout(30, pace=4, now=950) == 50  # capped by what is left of the run
    assert liveness_timeout(30, pace=4, now=2000) == 30  # past the budget: as chosen


def test_the_pace_is_the_machine_against_the_reference_times_the_suites_load() -> None:
    assert pace_of(0.1, load=2) == 2.0  # a faster machine never shortens a wait
    assert pace_of(100, load=1) == 3.0  # capped: past that the budget is lost anyway
