"""Local cluster figures: warm start per tier, 200 fake GPU nodes to Ready, idle memory per component.

Run: .venv/bin/python -m bench.cluster_startup   (takes the cluster down first, leaves it down)
"""

from __future__ import annotations

import time
from pathlib import Path

from localcluster import Cluster, Tier
from localcluster.cluster import TIER_COMPONENTS


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its descendants (containerd's shims, pods' processes)."""
    total = 0.0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except FileNotFoundError:
            continue
        total += (
            next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
            / 1024
        )
        stack.extend(int(c) for c in children)
    return total


def main() -> None:
    cluster = Cluster()
    cluster.down()
    times = {}
    for tier in Tier:
        start = time.monotonic()
        cluster.up(tier, fake_nodes=200)
        times[tier] = time.monotonic() - start
    time.sleep(10)  # let the components settle before reading idle memory
    print("\n== warm start, incremental per tier (build cache warm, state empty)")
    for tier, seconds in times.items():
        print(f"tier {tier}: {seconds:6.1f} s")
    print("\n== idle memory (RSS, MiB) with 200 fake nodes")
    total = 0.0
    for component in TIER_COMPONENTS["C"]:
        pid = cluster.procs.pid(component)
        mib = rss_mib(pid) if pid else 0.0
        total += mib
        print(f"{component:26s} {mib:8.0f}")
    print(f"{'total':26s} {total:8.0f}")
    cluster.down()


if __name__ == "__main__":
    main()
