"""The tests' fault hook (kube/fault.py): inert unless its environment names an action; armed, it takes
the process away once, before the second write of the first pass that decides to delete children of a
labelled job."""

from __future__ import annotations

import pytest

from dtjob.kube.fault import FAULT_ENV, FAULT_LABEL, FaultHook

LABELLED = {"metadata": {"name": "j", "labels": {FAULT_LABEL: "yes"}}}
PLAIN = {"metadata": {"name": "j"}}


def writes(hook: FaultHook, job: dict[str, object], deletes: bool, count: int) -> None:
    with hook.pass_of(job, decides_deletes=deletes):
        for _ in range(count):
            hook.before_write()


def test_the_hook_is_inert_when_its_environment_names_no_action(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULT_ENV, raising=False)
    assert FaultHook.from_env().action is None
    taken: list[str] = []
    hook = FaultHook(None, take_away=taken.append)
    writes(hook, LABELLED, deletes=True, count=5)
    hook.before_write()  # outside any pass too
    assert taken == []


def test_armed_it_fires_once_before_the_second_write_of_a_deleting_pass_of_a_labelled_job() -> None:
    taken: list[str] = []
    hook = FaultHook("exit", take_away=taken.append)
    writes(hook, PLAIN, deletes=True, count=3)  # not labelled
    writes(hook, LABELLED, deletes=False, count=3)  # decides no delete
    assert taken == []
    with hook.pass_of(LABELLED, decides_deletes=True):
        hook.before_write()
        assert taken == []  # the first write goes out
        hook.before_write()
        assert taken == ["exit"]  # before the second
        hook.before_write()
    writes(hook, LABELLED, deletes=True, count=3)
    assert taken == ["exit"]  # once in the process's life


def test_an_unknown_action_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match=FAULT_ENV):
        FaultHook("crash")
