"""What a GPUDirect profile needs running on the cluster: the DaemonSets, the TCPX(O) daemon and plugin
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
# GKE labels the nodes of a node pool with managed DRANET enabled (Cluster Toolkit
# modules/compute/gke-node-pool/main.tf at d1236e22, read 2026-11-26; tests/data/gke_recipes/rdma-dranet.yaml).
# The DeviceClass alone says nothing: GKE installs its networking DeviceClasses on every cluster from
# 1.34.1-gke.1829001 (GKE's "Allocate network resources using DRA" page), with DRANET node pools or without.
DRANET_NODE_LABEL: Final = "cloud.google.com/gke-networking-dra-driver"
PREREQUISITE_DAEMONSETS: Final = frozenset(name for needed in PREREQUISITES.values() for name in needed)

# A TCPX(O) daemon must match the NCCL plugin the cluster's installer DaemonSet put on the nodes (both
# READMEs: "The tcpx-daemon [tcpxo-daemon] version is coupled with the NCCL plugin installer version"): each
# release pairs an installer image with a daemon image. Installer tag -> daemon tag; the pairs are test data in
# tests/data/gke_recipes/gpudirect-tcpx(o).yaml. TCPX: container-engine-accelerators gpudirect-tcpx/README.md
# "Releases" at 98c85a6e (Jun 22, 2026), read 2026-11-28. TCPXO: gpudirect-tcpxo/README.md "Releases" at
# 685dca25 (Jan 9, 2026), read 2026-11-26. Both installers' plugin images share one name (their registry
# paths differ: gpudirect-tcpx/, gpudirect-tcpxo/).
TCPX_INSTALLER: Final = "nccl-tcpx-installer"
TCPX_PLUGIN_IMAGE: Final = "nccl-plugin-gpudirecttcpx-dev"
TCPX_DAEMON_FOR_PLUGIN: Final = {
    "v3.1.12": "v2.0.15",
    "v3.1.9": "v2.0.12",
}
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


class DaemonPairing(NamedTuple):
    """Where a profile's plugin version shows (the installer DaemonSet and its plugin image's name), the
    daemon each version pairs with, whose release notes say so, and the chart value that sets the daemon."""

    installer: str
    plugin_image: str
    daemon_for_plugin: Mapping[str, str]
    release_notes: str
    chart_value: str


DAEMON_PAIRINGS: Final = {
    NcclProfileName.GPUDIRECT_TCPX: DaemonPairing(
        TCPX_INSTALLER,
        TCPX_PLUGIN_IMAGE,
        TCPX_DAEMON_FOR_PLUGIN,
        "GKE's TCPX release notes",
        "nccl.daemonImages.tcpx",
    ),
    NcclProfileName.GPUDIRECT_TCPXO: DaemonPairing(
        TCPXO_INSTALLER,
        TCPXO_PLUGIN_IMAGE,
        TCPXO_DAEMON_FOR_PLUGIN,
        "GKE's TCPXO release notes",
        "nccl.daemonImages.tcpxo",
    ),
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
