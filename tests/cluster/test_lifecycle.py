"""`make cluster-down` and `make cluster-up`, twice in a row, as a user runs them: every up reuses the build
cache and brings all of tier C up; every down leaves no process, mount, interface, address or iptables
rule of the cluster behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from localcluster import Cluster, Tier
from localcluster.hostnet import LOOPBACK_ALIASES, RULE_COMMENT
from localcluster.layout import POD_BRIDGE
from tests.support.paths import REPO

TOOLS = ("etcd", "k8s", "kwok", "coredns", "helm", "kueue")


def make(*targets: str) -> str:
    proc = subprocess.run(
        ["make", *targets], cwd=REPO, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, (
        f"make {' '.join(targets)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout + proc.stderr


def command_lines() -> list[str]:
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended while we looked
    return lines


def leftovers(cluster: Cluster) -> list[str]:
    """Everything of the cluster still on the host."""
    state, binaries = str(cluster.layout.state), str(cluster.layout.cache / "bin")
    found = [f"process: {c[:200]}" for c in command_lines() if state in c or binaries in c]
    found += [f"mount: {m}" for m in Path("/proc/mounts").read_text().splitlines() if state in m]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    found += [f"interface: {line[:120]}" for line in links.splitlines() if POD_BRIDGE in line]
    addresses = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True
    ).stdout
    found += [f"address: {ip}" for ip in LOOPBACK_ALIASES if f" {ip}/32 " in addresses]
    for tool in ("iptables-save", "ip6tables-save"):
        rules = subprocess.run([tool], capture_output=True, text=True, check=True).stdout
        found += [f"{tool}: {r}" for r in rules.splitlines() if RULE_COMMENT in r or "KUBE-" in r]
    if cluster.layout.state.exists():
        found.append(f"state directory: {state}")
    return found


# Takes the whole cluster down and up (and counts every process of it).
@pytest.mark.cluster_wide
@pytest.mark.tier_c
def test_cluster_up_and_down_twice_reuse_the_build_cache_and_leave_nothing_behind(
    local_cluster: Cluster,
) -> None:
    # Left up at the end: the suite goes on on it (a third down would prove nothing the second did not).
    for round_ in (1, 2):
        make("cluster-down")
        assert leftovers(local_cluster) == [], f"round {round_}: left behind by cluster-down"
        output = make("cluster-up", "TIER=C")
        assert not [line for line in output.splitlines() if line.startswith("[build]") and "building" in line]
        assert all(f"[build] {tool}: cached" in output for tool in TOOLS), output[-3000:]
        assert local_cluster.running_tier() == Tier.C
        nodes = local_cluster.kubectl("get", "nodes", "-o", "name")
        assert nodes is not None and nodes.count("node/") > 200, nodes
        # Up means pods can be placed: no node still carries the not-ready taint a new node is given (the
        # real one did for ~40 s after up returned, and pods created then waited as long).
        assert local_cluster.tainted_nodes() == [], f"round {round_}: tainted when up returned"
