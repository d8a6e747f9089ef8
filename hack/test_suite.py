"""`make test`: the whole suite as two pytest processes side by side on one local cluster
(docs/testing.md#sharing-the-cluster).

- alone: the cluster-wide tests, then the Kueue tests, one at a time; each cluster-wide test has the
  cluster to itself (tests/support/sharing.py);
- shared: every other test, in TEST_WORKERS pytest-xdist workers: the tests that need no cluster first
  (they run while the cluster-wide ones hold the cluster), then the cluster tests.

Each writes its log to .artifacts/test-<part>.log, printed when it ends; a line a minute says how far
each has got. Then the duration report of the whole run, and the cluster taken down (unless
DTJOB_KEEP_CLUSTER=1). Extra arguments go to both pytest processes (a path, `-k`, `-x`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from localcluster import Cluster
from tests.support.durations import ARTIFACTS, Durations, merge

ALONE = "cluster_wide or kueue"
NO_TESTS = 5  # pytest's exit code when a selection holds no test


def pytest_command(part: str, workers: int, extra: list[str]) -> list[str]:
    common = [sys.executable, "-m", "pytest", "-q", "-ra", "--durations=10", *extra]
    if part == "alone":
        return [*common, "-m", ALONE, "-p", "no:xdist"]
    # One test a unit of work, handed out in the order tests/conftest.py sorts them.
    return [
        *common,
        "-m",
        f"not ({ALONE})",
        "-n",
        str(workers),
        "--dist",
        "loadgroup",
        "--no-loadscope-reorder",
    ]


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][-90:] if lines else "starting"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.test_suite", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3, help="xdist workers of the shared part")
    args, extra = parser.parse_known_args(argv)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in ARTIFACTS.glob("test-durations*"):
        stale.unlink()
    keep = os.environ.get("DTJOB_KEEP_CLUSTER") == "1"
    started = time.monotonic()
    running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for part in ("alone", "shared"):
        log = ARTIFACTS / f"test-{part}.log"
        env = {**os.environ, "DTJOB_KEEP_CLUSTER": "1", "DTJOB_DURATIONS_PART": part}
        with log.open("wb") as out:
            process = subprocess.Popen(
                pytest_command(part, args.workers, extra), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env,
            )  # fmt: skip
        running[part] = (process, log)
        print(f"[suite] {part}: {' '.join(process.args[2:])} (log: {log})", flush=True)  # type: ignore[index]
    codes: dict[str, int] = {}
    next_progress = started + 60
    try:
        while len(codes) < len(running):
            time.sleep(1)
            for part, (process, log) in running.items():
                if part not in codes and (code := process.poll()) is not None:
                    codes[part] = code
                    print(
                        f"\n[suite] ===== {part} ended ({code}) after {time.monotonic() - started:.0f} s ====="
                    )
                    print(log.read_text(errors="replace"), flush=True)
            if time.monotonic() >= next_progress and len(codes) < len(running):
                next_progress += 60
                progress = "; ".join(
                    f"{p}: {last_line(log)}" for p, (_, log) in running.items() if p not in codes
                )
                print(f"[suite] {time.monotonic() - started:4.0f} s  {progress}", flush=True)
    finally:
        for process, _ in running.values():
            if process.poll() is None:
                process.terminate()
        if not keep:
            Cluster().down()
    parts = [p for p in (ARTIFACTS / f"test-durations-{part}.json" for part in running) if p.exists()]
    report = merge(parts, time.monotonic() - started)
    print(report.read_text())
    outcomes = [
        str(t["outcome"]) for t in Durations.from_json(report.with_suffix(".json").read_text()).tests.values()
    ]
    failed = sum(o in ("failed", "error") for o in outcomes)
    print(f"[suite] {time.monotonic() - started:.0f} s; the duration report: {report}")
    print(f"{outcomes.count('passed')} passed, {failed} failed, {outcomes.count('skipped')} skipped")
    ran = [code for code in codes.values() if code != NO_TESTS]
    if not ran:
        return NO_TESTS
    return max(ran)


if __name__ == "__main__":
    sys.exit(main())
