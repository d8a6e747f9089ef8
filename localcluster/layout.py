"""Where the cluster keeps its binaries, state, logs and addresses (one place, so `down` can undo all)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Every address lives on this machine: aliases on `lo`, the project's own bridge and pod range.
NODE_IP = "10.87.0.1"  # apiserver bind/advertise address and the real node's IP
DNS_IP = "10.87.0.10"  # CoreDNS, as a host process
KWOK_NODE_IP = "10.87.0.2"
POD_CIDR = "10.88.0.0/16"
POD_BRIDGE = "dtjob0"
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
KWOK_POD_CIDR = "10.244.0.0/16"
APISERVER_PORT = 6443
ETCD_PORT = 2379
ETCD_PEER_PORT = 2380
REAL_NODE_NAME = "localnode"
K8S_MINOR = "1.34"


@dataclass(frozen=True)
class RealNode:
    """A node of real pods (containerd, runc, a kubelet) and where it lives on this machine."""

    name: str
    ip: str
    pod_cidr: str
    bridge: str
    directory: str
    """Its state folder under the cluster's (and its containerd's under the cache)."""
    kubelet_healthz_port: int
    cgroup_root: str
    """Where its kubelet puts the pods' cgroups: a second kubelet must not take the first one's."""


# The real node; a second one (`up --real-nodes 2`) is a second containerd and kubelet on this machine,
# with its own pod range and bridge, which a benchmark can take away as a cluster loses a node.
REAL_NODES = (
    RealNode(REAL_NODE_NAME, NODE_IP, POD_CIDR, POD_BRIDGE, "node", 10248, "/"),
    RealNode("localnode2", "10.87.0.3", "10.89.0.0/16", "dtjob1", "node2", 10258, "/localnode2"),
)


@dataclass(frozen=True)
class Layout:
    cache: Path
    state: Path

    @classmethod
    def from_env(cls) -> Layout:
        return cls(
            cache=Path(os.environ.get("DTJOB_CACHE", "/var/cache/dtjob")),
            state=Path(os.environ.get("DTJOB_CLUSTER_DIR", "/var/lib/dtjob-cluster")),
        )

    @cached_property
    def bin_dirs(self) -> dict[str, Path]:
        """Cache dir of each Go-built tool, as build.sh names them (keyed by its go.mod+go.sum)."""
        out = subprocess.run(
            [str(HERE / "build.sh"), "--print-dirs"],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "DTJOB_CACHE": str(self.cache)},
        ).stdout
        return {k: Path(v) for k, v in (line.split("=", 1) for line in out.split())}

    def binary(self, tool: str, name: str | None = None) -> Path:
        return self.bin_dirs[tool] / (name or tool)

    @property
    def kubectl(self) -> Path:
        return self.binary("k8s", "kubectl")

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "log"

    @property
    def audit_log(self) -> Path:
        return self.logs / "audit.log"

    @property
    def pids(self) -> Path:
        return self.state / "pid"

    @property
    def images(self) -> Path:
        return self.cache / "images"

    def kubeconfig(self, user: str = "admin") -> Path:
        return self.state / f"{user}.kubeconfig"


def write_if_changed(path: Path, text: str) -> Path:
    """Components watch their config files (kube-proxy exits when its file changes): leave equal ones be."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
