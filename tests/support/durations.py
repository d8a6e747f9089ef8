"""The suite's duration report: every test's time (setup, call and teardown together), the totals per
folder and per tier, and the 50 slowest, written to `.artifacts/test-durations.txt` (and `.json`) at the
end of every run, so that where the time goes is known without running anything again (docs/testing.md).

With pytest-xdist the controller receives every worker's reports, so the same hooks see all tests; the
wall time is the controller's."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("DTJOB_ARTIFACTS", REPO / ".artifacts"))
SLOWEST = 50
TIERS = ("tier_c", "tier_b", "tier_a")


def tier_of(keywords: object) -> str:
    """The highest cluster tier among a test's markers, or `no cluster`."""
    names = set(keywords) if keywords is not None else set()  # type: ignore[call-overload]
    return next((tier for tier in TIERS if tier in names), "no cluster")


class DurationReport:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = defaultdict(float)
        self.tier: dict[str, str] = {}
        self.outcome: dict[str, str] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        self.tier.setdefault(report.nodeid, tier_of(report.keywords))
        if report.when == "call" or report.outcome != "passed":
            self.outcome[report.nodeid] = report.outcome

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        wall = time.monotonic() - self.started
        text = self.render(wall)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "test-durations.txt").write_text(text)
        tests = {
            nodeid: {
                "seconds": round(s, 2),
                "tier": self.tier[nodeid],
                "outcome": self.outcome.get(nodeid, "passed"),
            }
            for nodeid, s in sorted(self.seconds.items())
        }
        (ARTIFACTS / "test-durations.json").write_text(
            json.dumps({"wall_seconds": round(wall, 1), "tests": tests}, indent=1)
        )
        terminalreporter.write_line(f"duration report: {ARTIFACTS / 'test-durations.txt'}")

    def render(self, wall: float) -> str:
        by_folder: dict[str, list[float]] = defaultdict(list)
        by_tier: dict[str, list[float]] = defaultdict(list)
        for nodeid, seconds in self.seconds.items():
            by_folder["/".join(nodeid.split("::")[0].split("/")[:2])].append(seconds)
            by_tier[self.tier[nodeid]].append(seconds)
        total = sum(self.seconds.values())
        lines = [f"# {len(self.seconds)} tests, {total:.0f} s of test time, {wall:.0f} s wall", ""]
        for title, groups in (("folder", by_folder), ("tier", by_tier)):
            lines.append(f"## per {title}: tests, seconds, share of test time")
            for name, times in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
                lines.append(
                    f"{sum(times):8.1f} s {len(times):5d}  {100 * sum(times) / total:5.1f} %  {name}"
                )
            lines.append("")
        lines.append(f"## the {SLOWEST} slowest: seconds, tier, test")
        slowest = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:SLOWEST]
        lines += [f"{seconds:8.1f} s  {self.tier[nodeid]:10s}  {nodeid}" for nodeid, seconds in slowest]
        return "\n".join(lines) + "\n"
