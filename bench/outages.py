"""Control-plane outages, the long run: the outage tests (tests/integration/test_outages.py) with
60-second outages instead of the suite's short ones, printing what each measured: the API server and
etcd crashed and down for 60 s, and the operator alone cut off from the API server for 60 s.

    .venv/bin/python -m bench.outages [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    env = {**os.environ, "DTJOB_OUTAGE_SECONDS": str(args.seconds), "DTJOB_KEEP_CLUSTER": "1"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        "tests/integration/test_outages.py",
    ]
    run = subprocess.run(command, env=env, capture_output=True, text=True)
    figures = [
        line for line in run.stdout.splitlines() if " down " in line or "cut off" in line or "passed" in line
    ]
    print("\n".join(figures) if figures else run.stdout[-3000:])
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
