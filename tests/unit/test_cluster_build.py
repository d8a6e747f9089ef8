"""The local cluster's Go build (localcluster/build.sh): one module for every tool but etcd, and a CoreDNS
with only the plugins the cluster's Corefile uses."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from localcluster.node import coredns_config
from tests.support.paths import REPO

COREDNS_MAIN = REPO / "localcluster" / "gomod" / "cluster" / "coredns" / "main.go"
# A directive whose plugin package has another name (CoreDNS's plugin.cfg, v1.12.4: "prometheus:metrics").
PACKAGE_OF = {"prometheus": "metrics"}


def corefile_plugins(corefile: str) -> set[str]:
    """The directives of the Corefile's server blocks: the first word of each line one brace deep."""
    plugins, depth = set(), 0
    for line in corefile.splitlines():
        words = line.split()
        if depth == 1 and words and words[0] != "}":
            plugins.add(words[0])
        depth += line.count("{") - line.count("}")
    return plugins


def test_every_plugin_of_the_corefile_is_built_into_coredns() -> None:
    plugins = corefile_plugins(coredns_config(Path("/kubeconfig")))
    assert {"kubernetes", "ready", "health", "bind", "cache"} <= plugins, plugins
    built = set(re.findall(r'"github.com/coredns/coredns/plugin/([a-z0-9]+)"', COREDNS_MAIN.read_text()))
    missing = {p for p in plugins if PACKAGE_OF.get(p, p) not in built}
    assert not missing, f"the Corefile uses plugins {COREDNS_MAIN} does not import: {sorted(missing)}"


def test_the_corefile_parse_reads_only_the_server_blocks_directives() -> None:
    corefile = ".:53 {\n    errors\n    kubernetes x {\n        pods insecure\n    }\n    loop\n}\n"
    assert corefile_plugins(corefile) == {"errors", "kubernetes", "loop"}


def test_every_tool_but_etcd_is_built_from_one_module_into_one_folder() -> None:
    out = subprocess.run(
        [str(REPO / "localcluster" / "build.sh"), "--print-dirs"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin", "DTJOB_CACHE": "/cache"},
    ).stdout  # fmt: skip
    dirs = dict(line.split("=", 1) for line in out.split())
    assert set(dirs) == {"etcd", "k8s", "kwok", "coredns", "helm", "kueue"}
    shared = {dirs[t] for t in ("k8s", "kwok", "coredns", "helm", "kueue")}
    assert len(shared) == 1 and shared.pop().startswith("/cache/bin/cluster-"), dirs
    assert dirs["etcd"].startswith("/cache/bin/etcd-"), dirs
