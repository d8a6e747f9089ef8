"""The suite's net: tells a flake from a break, honestly (docs/testing.md#the-net).

After a full run, at most MAX_RERUNS failed tests run again, one at a time, alone, each on a cluster the
hygiene check has reset. A test that passes alone is flaky; one that fails alone has failed. The gate
passes only when nothing failed, and:
- a test that failed the hygiene check (it left the cluster dirty) is never rerun: it failed;
- more than MAX_RERUNS failures are not a flake's doing: none is rerun, all failed;
- a test the ledger (docs/flakes.md) holds with its cause not yet fixed that flakes again fails the gate
  until its cause is fixed; one whose fix is recorded is a flake again, reported as recurring.
Each flake is printed with its first failure line and the tests that overlapped it in time (from the
duration report's timeline), written to .artifacts/flakes.json, and added to the ledger as open.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

MAX_RERUNS = 5
# A failure line the hygiene check wrote (tests/support/hygiene.py): the test left the cluster dirty.
HYGIENE_MARK = "hygiene check"
OPEN = "open"
FAILED_OUTCOMES = ("failed", "error")


@dataclass(frozen=True)
class LedgerEntry:
    test: str
    date: str
    cause: str
    fix: str

    @property
    def open(self) -> bool:
        return self.fix.strip("` ").lower() in ("", OPEN)


@dataclass(frozen=True)
class Flake:
    test: str
    why: str
    overlapped: tuple[str, ...]
    recurred_after_fix: str | None = None


@dataclass(frozen=True)
class Failure:
    test: str
    why: str
    verdict: str


@dataclass(frozen=True)
class Outcome:
    passed: int
    flaky: tuple[Flake, ...]
    failed: tuple[Failure, ...]

    @property
    def green(self) -> bool:
        return not self.failed

    def line(self) -> str:
        return f"{self.passed} passed, {len(self.flaky)} flaky, {len(self.failed)} failed"


_ROW = re.compile(r"^\|\s*`(?P<test>[^`]+)`\s*\|(?P<date>[^|]*)\|(?P<cause>[^|]*)\|(?P<fix>[^|]*)\|\s*$")


def read_ledger(text: str) -> dict[str, LedgerEntry]:
    """The ledger's rows (a markdown table: test, date, cause, fix); a test's last row stands."""
    entries: dict[str, LedgerEntry] = {}
    for line in text.splitlines():
        if match := _ROW.match(line.strip()):
            parts = {k: v.strip() for k, v in match.groupdict().items()}
            entries[parts["test"]] = LedgerEntry(**parts)
    return entries


def ledger_row(flake: Flake, day: date) -> str:
    """A new flake's row: open until somebody finds its cause and records the fix."""
    why = flake.why.replace("|", "/")[:160]
    return f"| `{flake.test}` | {day.isoformat()} | not yet found: {why} | {OPEN} |"


def overlapping(tests: dict[str, dict[str, object]], nodeid: str, limit: int = 8) -> tuple[str, ...]:
    """The tests that ran while `nodeid` did (both parts start together), the longest overlap first."""

    def span(test: dict[str, object]) -> tuple[float, float] | None:
        start = test.get("started")
        if start is None:
            return None
        return float(str(start)), float(str(start)) + float(str(test["seconds"]))

    mine = span(tests[nodeid])
    if mine is None:
        return ()
    overlaps: list[tuple[float, str]] = []
    for other, test in tests.items():
        theirs = span(test)
        if other == nodeid or theirs is None:
            continue
        shared = min(mine[1], theirs[1]) - max(mine[0], theirs[0])
        if shared > 0:
            overlaps.append((shared, other))
    return tuple(name for _, name in sorted(overlaps, key=lambda o: (-o[0], o[1]))[:limit])


def judge(
    tests: dict[str, dict[str, object]],
    passes_alone: Callable[[str], bool],
    ledger: dict[str, LedgerEntry],
) -> Outcome:
    """The run's outcome from its duration report's tests, rerunning the failed ones through
    `passes_alone` (called once per test that qualifies, in order)."""
    failed = {n: str(t.get("why", "")) for n, t in sorted(tests.items()) if t["outcome"] in FAILED_OUTCOMES}
    passed = sum(t["outcome"] == "passed" for t in tests.values())
    if len(failed) > MAX_RERUNS:
        verdict = f"not rerun: {len(failed)} tests failed, more than the net's {MAX_RERUNS}"
        return Outcome(passed, (), tuple(Failure(n, why, verdict) for n, why in failed.items()))
    flaky: list[Flake] = []
    failures: list[Failure] = []
    for nodeid, why in failed.items():
        if HYGIENE_MARK in why:
            failures.append(Failure(nodeid, why, "left the cluster dirty: never rerun"))
            continue
        if not passes_alone(nodeid):
            failures.append(Failure(nodeid, why, "failed again, alone"))
            continue
        entry = ledger.get(nodeid)
        if entry is not None and entry.open:
            verdict = f"flaked again while its ledger entry of {entry.date} is open ({entry.cause[:100]})"
            failures.append(Failure(nodeid, why, verdict))
            continue
        fix = entry.fix.strip("` ") if entry is not None else None
        flaky.append(Flake(nodeid, why, overlapping(tests, nodeid), fix))
    return Outcome(passed, tuple(flaky), tuple(failures))


def report(outcome: Outcome) -> str:
    """What the run prints before its last line: each flake and each failure, with why."""
    lines: list[str] = []
    for flake in outcome.flaky:
        again = f" (again, after its fix {flake.recurred_after_fix})" if flake.recurred_after_fix else ""
        lines += [f"[net] FLAKY{again}: {flake.test}", f"        first failure: {flake.why}"]
        lines += [f"        beside: {other}" for other in flake.overlapped]
    for failure in outcome.failed:
        lines += [f"[net] FAILED: {failure.test}: {failure.verdict}", f"        {failure.why}"]
    return "\n".join(lines)


def record(outcome: Outcome, artifacts: Path, ledger_file: Path, day: date) -> None:
    """.artifacts/flakes.json, and each flake added to the ledger as open (its cause is to be found)."""
    artifacts.mkdir(parents=True, exist_ok=True)
    (artifacts / "flakes.json").write_text(
        json.dumps(
            {"flaky": [asdict(f) for f in outcome.flaky], "failed": [asdict(f) for f in outcome.failed]},
            indent=1,
        )
    )
    if outcome.flaky and ledger_file.exists():
        text = ledger_file.read_text()
        rows = "\n".join(ledger_row(flake, day) for flake in outcome.flaky)
        ledger_file.write_text(text.rstrip("\n") + "\n" + rows + "\n")


def rerun_command(nodeid: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:xdist", nodeid]


def passes_alone(nodeid: str, env: dict[str, str], log: Path, before: Callable[[], None]) -> bool:
    """Run one test alone (after `before`: the hygiene reset), its output in `log`; True if it passed."""
    before()
    with log.open("wb") as out:
        code = subprocess.call(
            rerun_command(nodeid), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    print(f"[net] {nodeid}: {'passed' if code == 0 else f'failed ({code})'} alone (log: {log})", flush=True)
    if code != 0:  # why, where CI's log shows it
        print("\n".join(log.read_text(errors="replace").splitlines()[-40:]), flush=True)
    return code == 0
