"""NCCL network profiles: the env, pod annotations, volumes and sidecar each GKE machine family needs.

Values follow GKE's GPUDirect guides (shared/reference/platform-facts.md §3.3). Network names (vpc1..,
gvnic-1, rdma-0..) are the ones those guides create; a cluster that names its networks differently
overrides the annotation in the pod template (template annotations win). Without this plumbing NCCL
silently falls back to TCP, 10-100x slower; with it on a cluster that lacks the networks, the pods never
start. So `Auto` picks a GPUDirect profile only where it can work (`choose`), and says why in status.nccl.
"""

from dtjob.core.gke.autopilot import (
    COMPUTE_CLASS_LABEL,
    autopilot_cluster,
    autopilot_node,
    selects_autopilot,
)
from dtjob.core.gke.choice import (
    NetworkChoice,
    choose,
    missing_device_class,
    missing_networks,
    name_and_tag,
    needs_networks,
    with_daemon,
)
from dtjob.core.gke.env import library_path, nccl_env
from dtjob.core.gke.machines import AUTO_PROFILES, MACHINES, machine_of
from dtjob.core.gke.prerequisites import (
    DAEMON_PAIRINGS,
    DRANET_NODE_LABEL,
    PREREQUISITE_DAEMONSETS,
    PREREQUISITE_NAMESPACES,
    Installer,
    on_autopilot,
)
from dtjob.core.gke.profiles import (
    DAEMON_NOT_READY_RESTARTS,
    DAEMON_SIDECARS,
    GIB_TUNING,
    GPUDIRECT_TCPXO,
    HEALTH_CHECK_FILE,
    MANAGED_RDMA_DEVICE_CLASS,
    NCCL_FALLBACK_PREFIX,
    NETWORK_GROUP,
    NETWORK_PLURAL,
    NETWORK_VERSION,
    PROFILES,
    profile_for,
)

__all__ = [
    "AUTO_PROFILES",
    "COMPUTE_CLASS_LABEL",
    "DAEMON_NOT_READY_RESTARTS",
    "DAEMON_PAIRINGS",
    "DAEMON_SIDECARS",
    "DRANET_NODE_LABEL",
    "GIB_TUNING",
    "GPUDIRECT_TCPXO",
    "HEALTH_CHECK_FILE",
    "MACHINES",
    "MANAGED_RDMA_DEVICE_CLASS",
    "NCCL_FALLBACK_PREFIX",
    "NETWORK_GROUP",
    "NETWORK_PLURAL",
    "NETWORK_VERSION",
    "PREREQUISITE_DAEMONSETS",
    "PREREQUISITE_NAMESPACES",
    "PROFILES",
    "Installer",
    "NetworkChoice",
    "autopilot_cluster",
    "autopilot_node",
    "choose",
    "library_path",
    "machine_of",
    "missing_device_class",
    "missing_networks",
    "name_and_tag",
    "nccl_env",
    "needs_networks",
    "on_autopilot",
    "profile_for",
    "selects_autopilot",
    "with_daemon",
]
