"""The suite's net (hack/flake_net.py) run for real: `python -m hack.test_suite` on a toy suite of a few
tests in a folder of their own, its two pytest parts and its reruns real processes, no cluster (an empty
cluster folder: nothing to reset). Each case is a defence the gate needs, shown failing where it should:
a test that fails once and passes alone is flaky with the gate green; one that fails alone fails the gate;
a ledgered test that flakes again fails it; a test that left the cluster dirty is never rerun. Each run is
two pytest parts and a rerun or two, a few seconds each (about a minute for the module beside the suite):
the net is what decides whether any other test's failure parks finished work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.durations import REPO

CONFTEST = """
from tests.support.durations import DurationReport

def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationReport(), "dtjob-durations")
"""

INI = """[pytest]
markers =
    cluster_wide: toy
    kueue: toy
"""


def fails_once(name: str, message: str) -> str:
    """A test that fails on its first run (it leaves a mark beside itself) and passes after."""
    return f"""
from pathlib import Path

def test_{name}():
    mark = Path(__file__).with_suffix(".ran")
    if not mark.exists():
        mark.touch()
        raise AssertionError({message!r})
"""


TESTS = {
    "steady": "def test_steady():\n    pass\n",
    "flaky": fails_once("flaky", "timed out after 30s waiting for the toy"),
    "broken": "def test_broken():\n    assert 1 == 2, 'broken for good'\n",
    "dirty": fails_once("dirty", "hygiene check: node kwok-x left schedulable"),
}


def toy_suite(root: Path, *names: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text(INI)
    (root / "conftest.py").write_text(CONFTEST)
    for name in names:
        (root / f"test_{name}.py").write_text(TESTS[name])
    (root / "flakes.md").touch()
    return root


def run_suite(root: Path) -> tuple[int, list[str], dict[str, list[dict[str, object]]]]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DTJOB_ARTIFACTS": str(root / "artifacts"),
        "DTJOB_FLAKE_LEDGER": str(root / "flakes.md"),
        "DTJOB_CLUSTER_DIR": str(root / "no-cluster"),
        "DTJOB_CACHE": str(root / "no-cache"),
        "DTJOB_KEEP_CLUSTER": "1",
        "DTJOB_TEST_LOCKS": str(root / "locks"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "hack.test_suite", "--workers", "1"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    flakes = json.loads((root / "artifacts" / "flakes.json").read_text())
    return done.returncode, lines, flakes


def test_a_test_that_fails_once_and_passes_alone_is_flaky_with_the_gate_green_and_ledgered_open(
    tmp_path: Path,
) -> None:
    root = toy_suite(tmp_path / "toy", "steady", "flaky")
    code, lines, flakes = run_suite(root)
    assert (code, lines[-1]) == (0, "1 passed, 1 flaky, 0 failed"), "\n".join(lines[-30:])
    [flake] = flakes["flaky"]
    assert flake["test"] == "test_flaky.py::test_flaky"
    assert "timed out after 30s waiting for the toy" in str(flake["why"])
    assert flake["overlapped"] == ["test_steady.py::test_steady"] or flake["overlapped"] == []
    assert any(line.startswith("[net] FLAKY: test_flaky.py::test_flaky") for line in lines)
    ledger = (root / "flakes.md").read_text()
    assert "| `test_flaky.py::test_flaky` |" in ledger and ledger.rstrip().endswith("| open |")


def test_a_ledgered_test_whose_cause_is_open_that_flakes_again_fails_the_gate(tmp_path: Path) -> None:
    root = toy_suite(tmp_path / "toy", "steady", "flaky")
    assert run_suite(root)[0] == 0  # ledgered, open
    (root / "test_flaky.ran").unlink()  # it will fail once more
    code, lines, flakes = run_suite(root)
    assert (code, lines[-1]) == (1, "1 passed, 0 flaky, 1 failed"), "\n".join(lines[-30:])
    assert "flaked again while its ledger entry" in str(flakes["failed"][0]["verdict"])
    # Its cause found and fixed (the fix recorded): a flake again, reported as recurring, gate green.
    ledger = root / "flakes.md"
    ledger.write_text(ledger.read_text().replace("| open |", "| `abc1234` |"))
    (root / "test_flaky.ran").unlink()
    code, lines, flakes = run_suite(root)
    assert (code, lines[-1]) == (0, "1 passed, 1 flaky, 0 failed"), "\n".join(lines[-30:])
    assert flakes["flaky"][0]["recurred_after_fix"] == "abc1234"


def test_a_test_that_fails_alone_too_fails_the_gate_and_one_that_left_the_cluster_dirty_is_not_rerun(
    tmp_path: Path,
) -> None:
    root = toy_suite(tmp_path / "toy", "steady", "broken", "dirty")
    code, lines, flakes = run_suite(root)
    assert (code, lines[-1]) == (1, "1 passed, 0 flaky, 2 failed"), "\n".join(lines[-30:])
    verdicts = {f["test"]: f["verdict"] for f in flakes["failed"]}
    assert verdicts == {
        "test_broken.py::test_broken": "failed again, alone",
        "test_dirty.py::test_dirty": "left the cluster dirty: never rerun",
    }
    assert "broken for good" in "\n".join(lines)  # the rerun's own failure, printed
