"""What a GPUDirect profile needs running on the cluster: the DaemonSets, the TCPXO daemon and plugin
pairs, and what the installers the cluster runs tell (Installer, on_autopilot)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

from dtjob.api import NcclProfileName
from dtjob.core.gke.profiles import AUTOPILOT_NAMESPACES

# What a GPUDirect profile needs running on the cluster besides its Network objects: GKE's installer of
# its NCCL plugin (without it the nodes have no plugin: NCCL fails or falls back to sockets) and, for the
# TCPX(O) daemons, the NRI device injector (without it the daemon gets none of the GPU devices its
# devices.gke.io annotation names). Names and namespaces as container-engine-accelerators' manifests
# create them (nccl-tcpx-installer.yaml, nccl-tcpxo-installer.yaml, nccl-rdma-installer.yaml,
# nri_device_injector/nri-device-injector.yaml and their -autopilot variants; read 2026-11-26): Standard
# clusters in kube-system, Autopilot in gpudirect-system (TCPX, TCPXO, NRI) and rdma-system (RDMA).
PLUGIN_INSTALLER: Final = "the NCCL plugin's installer"
NRI_INJECTOR: Final = "the NRI device injector"
PREREQUISITES: Final = {
    NcclProfileName.GPUDIRECT_TCPX: {
        "nccl-tcpx-installer": PLUGIN_INSTALLER,
        "device-injector": NRI_INJECTOR,
    },
    NcclProfileName.GPUDIRECT_TCPXO: {
        "nccl-tcpxo-installer": PLUGIN_INSTALLER,
        "device-injector": NRI_INJECTOR,
    },
    NcclProfileName.RDMA: {"nccl-rdma-installer": PLUGIN_INSTALLER},
    NcclProfileName.MANAGED_RDMA: {"nccl-rdma-installer": PLUGIN_INSTALLER},
}
PREREQUISITE_NAMESPACES: Final = ("kube-system", "gpudirect-system", "rdma-system")
PREREQUISITE_DAEMONSETS: Final = frozenset(name for needed in PREREQUISITES.values() for name in needed)

# The TCPXO daemon must match the NCCL plugin the cluster's nccl-tcpxo-installer put on the nodes: each
# release pairs an installer image with a daemon image (container-engine-accelerators
# gpudirect-tcpxo/README.md "Releases" at 685dca25, Jan 9, 2026, read 2026-11-26; the pairs are test data in
# tests/data/gke_recipes/gpudirect-tcpxo.yaml). Installer tag -> daemon tag.
TCPXO_INSTALLER: Final = "nccl-tcpxo-installer"
TCPXO_PLUGIN_IMAGE: Final = "nccl-plugin-gpudirecttcpx-dev"
TCPXO_DAEMON_FOR_PLUGIN: Final = {
    "v1.0.15": "v1.0.21",
    "v1.0.14": "v1.0.20",
    "v1.0.12": "v1.0.18",
    "v1.0.11": "v1.0.17",
    "v1.0.9-1": "v1.0.15",
    "v1.0.8-1": "v1.0.14",
    "v1.0.7": "v1.0.13_1",
    "v1.0.6": "v1.0.12",
    "v1.0.5": "v1.0.11",
    "v1.0.4": "v1.0.10",
    "v1.0.3": "v1.0.09",
    "v1.0.2": "v1.0.8",
    "v1.0.1": "v1.0.8",
    "v1.0.0": "v1.0.6-sctp",
}


class Installer(NamedTuple):
    """A GPUDirect prerequisite DaemonSet the cluster runs: where, and its pod template's images (an
    installer's say its plugin version)."""

    namespace: str
    images: tuple[str, ...]


def on_autopilot(installers: Mapping[str, Installer] | None) -> bool:
    """Whether the cluster's GPUDirect installers run where GKE's Autopilot manifests put them (Standard
    clusters run them in kube-system)."""
    return any(i.namespace in AUTOPILOT_NAMESPACES for i in (installers or {}).values())
