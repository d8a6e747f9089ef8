"""The suite's own machinery, which `make test` relies on to share one cluster: the locks and the
duration report."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support import durations, sharing
from tests.support.pace import PACE_ENV
from tests.support.waiting import wait_for, waits_ending_within, watching


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sharing, "LOCKS", tmp_path)
    return tmp_path


def blocked_flocks(locks: Path) -> int:
    """Waits for the locks under `locks` (the kernel lists a waiter with "->", and the file's inode)."""
    inodes = {f":{path.stat().st_ino} " for path in locks.iterdir()}
    lines = Path("/proc/locks").read_text().splitlines()
    return sum("->" in line and any(inode in line for inode in inodes) for line in lines)


def in_thread(action: object) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()

    def run() -> None:
        with action:  # type: ignore[attr-defined]
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def test_an_owner_waits_for_every_share_and_sharers_arriving_meanwhile_wait_behind_it(locks: Path) -> None:
    with sharing.sharing():
        owner, owned = in_thread(sharing.owning())
        wait_for(lambda: blocked_flocks(locks) >= 1, "the owner to wait for the share")
        late, shared_late = in_thread(sharing.sharing())
        wait_for(lambda: blocked_flocks(locks) >= 2, "the late sharer to wait in the turnstile")
        assert not owned.wait(0.5), "the owner did not wait for the share held"
        assert not shared_late.is_set(), "a sharer that came after a waiting owner went ahead of it"
    assert owned.wait(5), "the owner never got the resource once the share was given back"
    owner.join(5)
    assert shared_late.wait(5)
    late.join(5)


def test_shares_of_one_resource_do_not_wait_for_each_other_nor_for_another_resources_owner(
    locks: Path,
) -> None:
    with sharing.sharing(sharing.CLUSTER), sharing.owning(sharing.MACHINE):
        _, shared = in_thread(sharing.sharing(sharing.CLUSTER))
        assert shared.wait(5)


def report(tests: dict[str, tuple[float, str, str]], wall: float = 10.0) -> durations.Durations:
    return durations.Durations(
        wall, {n: {"seconds": s, "tier": t, "outcome": o} for n, (s, t, o) in tests.items()}
    )


def test_the_report_of_two_parts_has_every_test_the_totals_per_folder_and_tier_and_what_did_not_pass(
    tmp_path: Path,
) -> None:
    alone = report({"tests/e2e/test_x.py::test_a": (30.0, "tier_c", "passed")})
    alone.tests["tests/e2e/test_x.py::test_a"][durations.LOCK_WAIT] = 12.5
    shared = report({
        "tests/unit/test_y.py::test_b": (1.0, "no cluster", "passed"),
        "tests/e2e/test_z.py::test_c[p]": (9.0, "tier_c", "failed"),
    })  # fmt: skip
    shared.tests["tests/e2e/test_z.py::test_c[p]"]["why"] = "call: AssertionError: 1 != 2 (test_z.py:7)"
    parts = [alone.write(tmp_path, "part-alone").with_suffix(".json"),
             shared.write(tmp_path, "part-shared").with_suffix(".json")]  # fmt: skip
    text = durations.merge(parts, wall_seconds=35.0, directory=tmp_path).read_text()
    assert text.startswith("# 3 tests, 40 s of test time, 35 s wall; of the test time 12 s waiting")
    assert "    39.0 s    12.5 s     2   97.5 %  tests/e2e" in text
    assert "     1.0 s     0.0 s     1    2.5 %  no cluster" in text
    # What did not pass comes last, with why, so that a log cut to its tail still names it.
    assert text.endswith(
        "  failed  tests/e2e/test_z.py::test_c[p]\n          call: AssertionError: 1 != 2 (test_z.py:7)\n"
    )
    slowest = text.split("the locks, tier, test\n")[1].split("\n\n")[0].splitlines()
    assert [line.split()[-1] for line in slowest] == [
        "tests/e2e/test_x.py::test_a", "tests/e2e/test_z.py::test_c[p]", "tests/unit/test_y.py::test_b"]  # fmt: skip
    assert slowest[0].split()[:4] == ["30.0", "s", "12.5", "s"]
    assert durations.Durations.from_json((tmp_path / "test-durations.json").read_text()).wall_seconds == 35.0


def test_a_wait_that_runs_out_says_what_it_saw_and_a_state_that_fails_does_not_hide_it() -> None:
    with pytest.raises(AssertionError, match=r"waiting for pods to go \(state then: \['spare1'\]\)"):
        wait_for(
            lambda: False, "pods to go", timeout=0.05, interval=0.01, timing=True, state=lambda: ["spare1"]
        )
    with pytest.raises(AssertionError, match=r"state then: could not be read: RuntimeError\('down'\)"):
        wait_for(lambda: False, "pods to go", timeout=0.05, interval=0.01, timing=True, state=_down)


def _down() -> object:
    raise RuntimeError("down")


def test_a_wait_beside_something_that_stopped_gives_up_at_once_saying_why() -> None:
    """The in-process operator that failed to log in left its test waiting out a 300 s wait for a
    checkpoint, with nothing about the operator in the failure."""
    reason: list[str] = []
    with watching(lambda: reason[0] if reason else None):
        assert wait_for(lambda: 1, "a value", timeout=60, timing=True) == 1
        reason.append("the in-process operator stopped: LoginError()")
        with pytest.raises(
            AssertionError, match=r"gave up waiting for a checkpoint: the in-process operator"
        ):
            wait_for(lambda: None, "a checkpoint", timeout=60, interval=0.01, timing=True)
    with pytest.raises(AssertionError, match=r"timed out after 0s waiting for a checkpoint$"):
        wait_for(lambda: None, "a checkpoint", timeout=0.05, interval=0.01, timing=True)


def test_a_wait_scaled_past_the_tests_own_timeout_ends_within_it_saying_what_there_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 600 s wait paced to 1,200 s was cut by pytest-timeout (600 s for the whole test) with a stack
    and not the job's status (2026-12-07)."""
    monkeypatch.setenv(PACE_ENV, "2")
    started = time.monotonic()
    with (
        waits_ending_within(0.2),
        pytest.raises(
            AssertionError,
            match=r"cut short by the test's own timeout waiting for Succeeded \(state then: Running\)",
        ),
    ):
        wait_for(lambda: None, "Succeeded", timeout=600, interval=0.01, state=lambda: "Running")
    assert time.monotonic() - started < 5
