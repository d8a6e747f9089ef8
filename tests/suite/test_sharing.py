"""The suite's training slots and its order of cluster tests (tests/support/sharing.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support import sharing


def test_no_more_than_the_slots_are_held_at_once_and_a_slot_given_back_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharing, "LOCKS", tmp_path)
    first, second = sharing.a_slot("trainings", 2), sharing.a_slot("trainings", 2)
    first.__enter__(), second.__enter__()
    third_holds, third_may_go = threading.Event(), threading.Event()

    def third() -> None:
        with sharing.a_slot("trainings", 2):
            third_holds.set()
            third_may_go.wait(timeout=30)

    waiting = threading.Thread(target=third)
    waiting.start()
    try:
        assert not third_holds.wait(timeout=1), "a third test trained beside two with two slots"
        second.__exit__(None, None, None)
        assert third_holds.wait(timeout=10), "the slot given back was not taken"
    finally:
        third_may_go.set()
        waiting.join(timeout=10)
        first.__exit__(None, None, None)


def test_the_trainings_spread_over_the_first_part_and_each_kind_keeps_its_order() -> None:
    items = [f"train-{i}" for i in range(4)] + [f"wait-{i}" for i in range(8)]
    order = sharing.interleaved(items, lambda item: item.startswith("train"), spread=0.5)
    assert [i for i in order if i.startswith("train")] == [f"train-{i}" for i in range(4)]
    assert [i for i in order if i.startswith("wait")] == [f"wait-{i}" for i in range(8)]
    # Four trainings over the first half of eight waiting tests: one every two of them, none in the second half.
    assert order[:3] == ["train-0", "wait-0", "train-1"]
    assert max(order.index(f"train-{i}") for i in range(4)) < order.index("wait-4")
    assert sharing.interleaved(["wait"], lambda item: False) == ["wait"]
    assert sharing.interleaved(["train"], lambda item: True) == ["train"]
