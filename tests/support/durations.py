"""The suite's duration report: every test's time (setup, call and teardown together), the totals per
folder and per tier, and the 50 slowest, written to `.artifacts/test-durations.txt` (and `.json`) at the
end of every run, so that where the time goes is known without running anything again (docs/testing.md).

With pytest-xdist the controller receives every worker's reports, so the same hooks see all tests; the
wall time is the controller's. `make test` runs two pytest processes side by side (hack/test_suite.py):
each writes its part (DTJOB_DURATIONS_PART), and `merge` makes the report of the whole from the parts."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("DTJOB_ARTIFACTS", REPO / ".artifacts"))
REPORT = "test-durations"
SLOWEST = 50
# A test's wait for the sharing locks (tests/conftest.py's cluster_lock), in its setup's time: time the
# machine spent on other tests, told apart from the test's own.
LOCK_WAIT = "lock_wait"
TIERS = ("tier_c", "tier_b", "tier_a")


def tier_of(keywords: object) -> str:
    """The highest cluster tier among a test's markers, or `no cluster`."""
    names = set(keywords) if keywords is not None else set()  # type: ignore[call-overload]
    return next((tier for tier in TIERS if tier in names), "no cluster")


@dataclass
class Durations:
    wall_seconds: float = 0.0
    tests: dict[str, dict[str, object]] = field(default_factory=dict)
    """nodeid: seconds (lock waits included), tier, outcome, lock_wait"""

    def to_json(self) -> str:
        return json.dumps({"wall_seconds": round(self.wall_seconds, 1), "tests": self.tests}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Durations:
        data = json.loads(text)
        return cls(float(data["wall_seconds"]), dict(data["tests"]))

    def render(self) -> str:
        seconds = {nodeid: float(t["seconds"]) for nodeid, t in self.tests.items()}  # type: ignore[arg-type]
        waits = {nodeid: float(t.get(LOCK_WAIT) or 0) for nodeid, t in self.tests.items()}  # type: ignore[arg-type]
        by_folder: dict[str, list[str]] = defaultdict(list)
        by_tier: dict[str, list[str]] = defaultdict(list)
        for nodeid in seconds:
            by_folder["/".join(nodeid.split("::")[0].split("/")[:2])].append(nodeid)
            by_tier[str(self.tests[nodeid]["tier"])].append(nodeid)
        total = sum(seconds.values()) or 1.0
        lines = [
            f"# {len(seconds)} tests, {sum(seconds.values()):.0f} s of test time, {self.wall_seconds:.0f} s wall;"
            f" of the test time {sum(waits.values()):.0f} s waiting for the sharing locks",
            "",
        ]
        for title, groups in (("folder", by_folder), ("tier", by_tier)):
            lines.append(
                f"## per {title}: seconds, of which waiting for the locks, tests, share of test time"
            )
            for name, ids in sorted(groups.items(), key=lambda kv: -sum(seconds[n] for n in kv[1])):
                took, waited = sum(seconds[n] for n in ids), sum(waits[n] for n in ids)
                lines.append(
                    f"{took:8.1f} s {waited:7.1f} s {len(ids):5d}  {100 * took / total:5.1f} %  {name}"
                )
            lines.append("")
        lines.append(f"## the {SLOWEST} slowest: seconds, of which waiting for the locks, tier, test")
        slowest = sorted(seconds.items(), key=lambda kv: -kv[1])[:SLOWEST]
        lines += [f"{s:8.1f} s {waits[n]:7.1f} s  {self.tests[n]['tier']!s:10s}  {n}" for n, s in slowest]
        # Last, so that a log cut to its tail (CI's) still names them.
        not_passed = sorted(n for n, t in self.tests.items() if t["outcome"] != "passed")
        if not_passed:
            lines += ["", "## not passed: outcome, test, why"]
            for n in not_passed:
                lines.append(f"{self.tests[n]['outcome']:>8s}  {n}")
                if why := self.tests[n].get("why"):
                    lines.append(f"          {why}")
        return "\n".join(lines) + "\n"

    def write(self, directory: Path, name: str = REPORT) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.json").write_text(self.to_json())
        text = directory / f"{name}.txt"
        text.write_text(self.render())
        return text


def why_failed(report: pytest.TestReport) -> str:
    """The failure's one line: pytest's crash message (an assertion's first line), where it was raised."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is None:
        return str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else ""
    message = str(crash.message).strip().splitlines()
    return f"{report.when}: {message[0][:300] if message else ''} ({Path(crash.path).name}:{crash.lineno})"


def merge(parts: list[Path], wall_seconds: float, directory: Path = ARTIFACTS) -> Path:
    """The report of a run made of several pytest processes side by side, from their parts."""
    whole = Durations(wall_seconds)
    for part in parts:
        whole.tests.update(Durations.from_json(part.read_text()).tests)
    return whole.write(directory)


class DurationReport:
    """The pytest plugin: registered by tests/conftest.py in the controller (or a plain run)."""

    def __init__(self, part: str | None = os.environ.get("DTJOB_DURATIONS_PART")) -> None:
        self.part = part
        self.started = time.monotonic()
        self.seconds: dict[str, float] = defaultdict(float)
        self.tier: dict[str, str] = {}
        self.outcome: dict[str, str] = {}
        self.why: dict[str, str] = {}
        self.started_at: dict[str, float] = {}
        self.worker: dict[str, str] = {}
        self.lock_wait: dict[str, float] = {}

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """When each test started, in seconds from the run's start: with the worker, the run's timeline
        (which tests waited on which, and when a worker stood idle) is in the report's JSON."""
        self.started_at.setdefault(nodeid, round(time.monotonic() - self.started, 1))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        self.tier.setdefault(report.nodeid, tier_of(report.keywords))
        for name, value in report.user_properties:
            if name == LOCK_WAIT:
                self.lock_wait[report.nodeid] = float(value)
        if gateway := getattr(getattr(report, "node", None), "gateway", None):
            self.worker.setdefault(report.nodeid, str(gateway.id))
        if report.when == "call" or report.outcome != "passed":
            self.outcome[report.nodeid] = (
                "error" if report.when != "call" and report.failed else report.outcome
            )
        if report.failed and report.nodeid not in self.why:
            self.why[report.nodeid] = why_failed(report)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        durations = Durations(time.monotonic() - self.started)
        for nodeid, seconds in sorted(self.seconds.items()):
            outcome = self.outcome.get(nodeid, "passed")
            durations.tests[nodeid] = {
                "seconds": round(seconds, 2),
                "tier": self.tier[nodeid],
                "outcome": outcome,
                "started": self.started_at.get(nodeid),
                **({"part": self.part} if self.part else {}),
                **({"worker": self.worker[nodeid]} if nodeid in self.worker else {}),
                **({LOCK_WAIT: self.lock_wait[nodeid]} if self.lock_wait.get(nodeid) else {}),
                **({"why": self.why[nodeid]} if nodeid in self.why else {}),
            }
        written = durations.write(ARTIFACTS, f"{REPORT}-{self.part}" if self.part else REPORT)
        terminalreporter.write_line(f"duration report: {written}")
