"""`make test`: the whole suite as two pytest processes side by side on one local cluster
(docs/testing.md#sharing-the-cluster).

- alone: the cluster-wide tests, then the Kueue tests, one at a time; each cluster-wide test has the
  cluster to itself (tests/support/sharing.py);
- shared: every other test, in TEST_WORKERS pytest-xdist workers: the tests that need no cluster first
  (they run while the cluster-wide ones hold the cluster), then the cluster tests; at most
  TRAINING_SLOTS of them train at once (tests/support/sharing.py), the other workers run tests that wait.

Each writes its log to .artifacts/test-<part>.log, printed when it ends; a line a minute says how far
each has got. Both get the machine's pace, measured first, which scales their liveness waits
(tests/support/pace.py). Then the duration report of the whole run, the net (hack/flake_net.py: at most
five failed tests rerun alone, each on a cluster the hygiene check reset), and the cluster taken down
(unless DTJOB_KEEP_CLUSTER=1). The last line says `N passed, M flaky, K failed`. Extra arguments go to
both parts' pytest processes (a path, `-k`, `-x`), not to the reruns, which name their test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from kubernetes.config import new_client_from_config

from hack import flake_net
from localcluster import Cluster, controlplane, kueue
from localcluster.layout import Layout
from tests.support import hygiene, pace
from tests.support.durations import ARTIFACTS, REPO, Durations, merge
from tests.support.sharing import TRAINING_SLOTS_ENV

ALONE = "cluster_wide or kueue"
NO_TESTS = 5  # pytest's exit code when a selection holds no test
TESTS_FAILED = 1  # pytest's exit code when tests ran and some failed (anything else: the run broke)
LEDGER = Path(os.environ.get("DTJOB_FLAKE_LEDGER", REPO / "docs" / "flakes.md"))
# The run's budget, past which liveness waits stop growing with the pace (docs/testing.md).
BUDGET_SECONDS = float(os.environ.get("DTJOB_TEST_BUDGET_SECONDS", 3600))


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
    parser.add_argument("--workers", type=int, default=5, help="xdist workers of the shared part")
    parser.add_argument(
        "--training-slots", type=int, default=3, help="tests of the shared part that train at once"
    )
    args, extra = parser.parse_known_args(argv)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in ARTIFACTS.glob("test-durations*"):
        stale.unlink()
    keep = os.environ.get("DTJOB_KEEP_CLUSTER") == "1"
    disk_check(Layout.from_env())
    probe = pace.probe_seconds()
    run_pace = os.environ.get(pace.PACE_ENV) or str(pace.pace_of(probe))
    paced = {
        pace.PACE_ENV: run_pace,
        pace.DEADLINE_ENV: str(time.time() + BUDGET_SECONDS),
        # Kueue's PodsReady timeout is a deadline for a gang's start, on Kueue's clock: paced too.
        kueue.PODS_READY_TIMEOUT_ENV: str(round(kueue.PODS_READY_TIMEOUT_SECONDS * float(run_pace))),
    }
    print(
        f"[suite] pace {paced[pace.PACE_ENV]} (probe {probe:.3f} s, reference {pace.REFERENCE_PROBE_SECONDS} s)"
    )
    started = time.monotonic()
    running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for part in ("alone", "shared"):
        log = ARTIFACTS / f"test-{part}.log"
        env = {**os.environ, **paced, "DTJOB_KEEP_CLUSTER": "1", "DTJOB_DURATIONS_PART": part}
        if part == "shared":
            env[TRAINING_SLOTS_ENV] = str(args.training_slots)
        with log.open("wb") as out:
            process = subprocess.Popen(
                pytest_command(part, args.workers, extra), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env,
            )  # fmt: skip
        running[part] = (process, log)
        print(f"[suite] {part}: {' '.join(process.args[2:])} (log: {log})", flush=True)  # type: ignore[index]
    codes: dict[str, int] = {}
    next_progress = started + 60
    etcd_peak: tuple[int, int] | None = None  # the largest database seen, and its quota
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
                if database := controlplane.read_etcd_database():
                    etcd_peak = max(etcd_peak or database, database)
                    progress = f"etcd {database[0] / 2**20:.0f} MiB; {progress}"
                print(f"[suite] {time.monotonic() - started:4.0f} s  {progress}", flush=True)
        parts = [p for p in (ARTIFACTS / f"test-durations-{part}.json" for part in running) if p.exists()]
        report = merge(parts, time.monotonic() - started)
        print(report.read_text())
        tests = Durations.from_json(report.with_suffix(".json").read_text()).tests
        print(f"[suite] {time.monotonic() - started:.0f} s; the duration report: {report}", flush=True)
        if etcd_peak:
            # A test that writes gigabytes fails every test after it, far from the cause (2026-12-03).
            size, quota = (round(n / 2**20) for n in etcd_peak)
            print(f"[suite] etcd's database at most {size} MiB of its {quota} MiB quota", flush=True)
        outcome = net(tests, {**os.environ, **paced, "DTJOB_KEEP_CLUSTER": "1"})
    finally:
        for process, _ in running.values():
            if process.poll() is None:
                process.terminate()
        if not keep:
            Cluster().down()
    broken = {part: code for part, code in codes.items() if code not in (0, TESTS_FAILED, NO_TESTS)}
    for part, code in broken.items():
        print(f"[suite] the {part} part broke off (pytest exit {code}): see its log above")
    print(f"[suite] {time.monotonic() - started:.0f} s in all; flakes: {ARTIFACTS / 'flakes.json'}")
    print(outcome.line())
    if all(code == NO_TESTS for code in codes.values()):
        return NO_TESTS
    return 0 if outcome.green and not broken else 1


def disk_check(layout: Layout) -> None:
    """Free disk, said first (a run short of it fails in an image import, far from the cause). Nothing is
    pruned here: an imported image's archive is gone, so a pruned node store means images rebuilt inside
    the tests (a torch build past a test's 600 s, 2026-12-02)."""
    layout.cache.mkdir(parents=True, exist_ok=True)
    print(
        f"[suite] {shutil.disk_usage(layout.cache).free / 2**30:.0f} GiB free under {layout.cache}",
        flush=True,
    )


def net(tests: dict[str, dict[str, object]], env: dict[str, str]) -> flake_net.Outcome:
    """The failed tests rerun alone (at most five), each after the hygiene check reset the cluster."""
    ledger = flake_net.read_ledger(LEDGER.read_text()) if LEDGER.exists() else {}
    reruns = iter(range(1, flake_net.MAX_RERUNS + 1))

    def passes_alone(nodeid: str) -> bool:
        index = next(reruns)
        log = ARTIFACTS / f"test-rerun-{index}.log"
        return flake_net.passes_alone(
            nodeid, {**env, "DTJOB_DURATIONS_PART": f"rerun-{index}"}, log, reset_cluster
        )

    outcome = flake_net.judge(tests, passes_alone, ledger)
    flake_net.record(outcome, ARTIFACTS, LEDGER, date.today())
    if text := flake_net.report(outcome):
        print(text, flush=True)
    return outcome


def reset_cluster() -> None:
    """The cluster as a test finds it at rest, before a rerun (tests/support/hygiene.py)."""
    cluster = Cluster()
    if cluster.running_tier() is None:
        return  # the rerun brings it up as its test needs
    api = new_client_from_config(config_file=str(cluster.kubeconfig))
    for done in hygiene.restore(api, cluster.kubectl, hygiene.snapshot(api), None, alone=True):
        print(f"[net] reset: {done}", flush=True)
    started = time.monotonic()
    going = hygiene.settle(api)
    print(
        f"[net] settled in {time.monotonic() - started:.0f} s" + (f"; still going: {going}" if going else "")
    )


if __name__ == "__main__":
    sys.exit(main())
