"""NCCL network profiles: the env, pod annotations, volumes and sidecar each GKE machine family needs.

Values follow GKE's GPUDirect guides (shared/reference/platform-facts.md §3.3). Network names (vpc1..,
gvnic-1, rdma-0..) are the ones those guides create; a cluster that names its networks differently
overrides the annotation in the pod template (template annotations win). Without this plumbing NCCL
silently falls back to TCP, 10-100x slower, so `Auto` picks the profile from the accelerator type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from dtjob.api import DistributedTrainingJobSpec, Framework, NcclProfileName

Env = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class NetworkProfile:
    env: Env
    annotations: Mapping[str, str] = field(default_factory=dict)
    volumes: tuple[Mapping[str, Any], ...] = ()
    trainer_mounts: tuple[Mapping[str, Any], ...] = ()
    # Native sidecars (init containers with restartPolicy Always): they stop when the trainer exits.
    sidecars: tuple[Mapping[str, Any], ...] = ()
    transport: str | None = None
    """The network NCCL uses under this profile, as its INFO log names it ("Using network <name>"): the
    net plugin's name. The preflight fails when NCCL used TCP sockets (Socket) instead."""
    preflight_floor_gbps: float | None = None
    """The preflight's default floor for all-reduce busbw at its largest size (64 MiB), GB/s: an order of
    magnitude above what NCCL over TCP sockets reaches on these machines (a few GB/s), well below what
    each fabric reaches. Published 2-node all-reduce busbw at large sizes: A3 High TCPX ~40 GB/s, A3 Mega
    TCPXO ~188 GB/s, A3 Ultra/A4 RDMA ~330-350 GB/s (nccl-tests figures in
    shared/reference/platform-facts.md, read 2026-11-23)."""


AUTO_PROFILES: Final = {
    "nvidia-h100-80gb": NcclProfileName.GPUDIRECT_TCPX,  # A3 High
    "nvidia-h100-mega-80gb": NcclProfileName.GPUDIRECT_TCPXO,  # A3 Mega
    "nvidia-h200-141gb": NcclProfileName.RDMA,  # A3 Ultra
    "nvidia-b200": NcclProfileName.RDMA,  # A4
}


def _interfaces(networks: list[str]) -> dict[str, str]:
    interfaces = [{"interfaceName": "eth0", "network": "default"}] + [
        {"interfaceName": f"eth{i}", "network": network} for i, network in enumerate(networks, start=1)
    ]
    return {
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": json.dumps(interfaces, separators=(",", ":")),
    }


def _host_path(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


_NVIDIA_LIBS = _host_path("dtj-nvidia-libs", "/home/kubernetes/bin/nvidia/lib64")
_SYS = _host_path("dtj-sys", "/sys")
_PROC_SYS = _host_path("dtj-proc-sys", "/proc/sys")
_DAEMON_MOUNTS: Final = (
    {"name": "dtj-nvidia-libs", "mountPath": "/usr/local/nvidia/lib64"},
    {"name": "dtj-sys", "mountPath": "/hostsysfs"},
    {"name": "dtj-proc-sys", "mountPath": "/hostprocsysfs"},
)
_TCPX_SOCKET_MOUNT: Final = {"name": "dtj-tcpx-socket", "mountPath": "/run/tcpx"}
_TCPX_NICS = "eth1,eth2,eth3,eth4"

TCP: Final = NetworkProfile(env=(("NCCL_SOCKET_IFNAME", "eth0"),))

GPUDIRECT_TCPX: Final = NetworkProfile(
    env=(
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("NCCL_CROSS_NIC", "0"),
        ("NCCL_ALGO", "Ring"),
        ("NCCL_PROTO", "Simple"),
        ("NCCL_NSOCKS_PERTHREAD", "4"),
        ("NCCL_SOCKET_NTHREADS", "1"),
        ("NCCL_NET_GDR_LEVEL", "PIX"),
        ("NCCL_P2P_PXN_LEVEL", "0"),
        ("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", _TCPX_NICS),
        ("NCCL_GPUDIRECTTCPX_CTRL_DEV", "eth0"),
        ("NCCL_DYNAMIC_CHUNK_SIZE", "524288"),
        ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
        ("NCCL_P2P_PCI_CHUNKSIZE", "524288"),
        ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"),
        ("NCCL_BUFFSIZE", "4194304"),
        (
            "NCCL_GPUDIRECTTCPX_TX_BINDINGS",
            "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177",
        ),
        (
            "NCCL_GPUDIRECTTCPX_RX_BINDINGS",
            "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191",
        ),
        ("NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS", "50000"),
        ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "/run/tcpx"),
        ("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64"),
    ),
    annotations=_interfaces(["vpc1", "vpc2", "vpc3", "vpc4"]),
    volumes=(_NVIDIA_LIBS, _SYS, _PROC_SYS, {"name": "dtj-tcpx-socket", "emptyDir": {}}),
    trainer_mounts=(_TCPX_SOCKET_MOUNT,),
    sidecars=(
        {
            "name": "tcpx-daemon",
            "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.9",
            "restartPolicy": "Always",
            "command": ["/tcpgpudmarxd/build/app/tcpgpudmarxd"],
            "args": [
                *("--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd"),
                *("--uds_path", "/run/tcpx", "--setup_param", "--verbose 128 2 0"),
            ],
            "securityContext": {"privileged": True},
            "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
            "volumeMounts": [*_DAEMON_MOUNTS, _TCPX_SOCKET_MOUNT],
        },
    ),
    transport="GPUDirectTCPX",
    preflight_floor_gbps=10.0,
)

_TCPXO_LIBS = "/usr/local/nvidia/lib64"
GPUDIRECT_TCPXO: Final = NetworkProfile(
    env=(
        ("NCCL_FASTRAK_CTRL_DEV", "eth0"),
        ("NCCL_FASTRAK_IFNAME", "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("NCCL_CROSS_NIC", "0"),
        ("NCCL_ALGO", "Ring,Tree"),
        ("NCCL_PROTO", "Simple"),
        ("NCCL_MIN_NCHANNELS", "4"),
        ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
        ("NCCL_P2P_PCI_CHUNKSIZE", "524288"),
        ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"),
        ("NCCL_FASTRAK_NUM_FLOWS", "2"),
        ("NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL", "0"),
        ("NCCL_BUFFSIZE", "8388608"),
        ("NCCL_FASTRAK_USE_SNAP", "1"),
        ("NCCL_FASTRAK_USE_LLCM", "1"),
        ("NCCL_NET_GDR_LEVEL", "PIX"),
        ("NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING", "0"),
        ("NCCL_TUNER_PLUGIN", "libnccl-tuner.so"),
        ("NCCL_TUNER_CONFIG_PATH", f"{_TCPXO_LIBS}/a3plus_tuner_config.textproto"),
        ("NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE", f"{_TCPXO_LIBS}/a3plus_guest_config.textproto"),
        ("NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS", "600000"),
        ("NCCL_NVLS_ENABLE", "0"),
        ("NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", "/dev/aperture_devices"),
        ("LD_LIBRARY_PATH", _TCPXO_LIBS),
    ),
    annotations={
        **_interfaces([f"vpc{i}" for i in range(1, 9)]),
        # The daemon requests no GPU, so GKE injects the GPU devices it needs through this annotation.
        "devices.gke.io/container.tcpxo-daemon": "".join(
            f"- path: {path}\n"
            for path in [
                *(f"/dev/nvidia{i}" for i in range(8)),
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/dmabuf_import_helper",
            ]
        ),
    },
    volumes=(_NVIDIA_LIBS, _SYS, _PROC_SYS, _host_path("dtj-aperture-devices", "/dev/aperture_devices")),
    trainer_mounts=({"name": "dtj-aperture-devices", "mountPath": "/dev/aperture_devices"},),
    sidecars=(
        {
            "name": "tcpxo-daemon",
            "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.9",
            "restartPolicy": "Always",
            "command": ["/fts/entrypoint_rxdm_container.sh"],
            "args": ["--num_hops=2", "--num_nics=8", "--uid=", "--alsologtostderr"],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
            "env": [{"name": "LD_LIBRARY_PATH", "value": _TCPXO_LIBS}],
            "volumeMounts": list(_DAEMON_MOUNTS),
        },
    ),
    transport="FasTrak",
    preflight_floor_gbps=20.0,
)

RDMA: Final = NetworkProfile(
    env=(
        ("NCCL_NET", "gIB"),
        ("NCCL_SOCKET_IFNAME", "eth0,eth1"),
        ("LD_LIBRARY_PATH", "/usr/local/gib/lib64:/usr/local/nvidia/lib64"),
    ),
    annotations=_interfaces(["gvnic-1", *(f"rdma-{i}" for i in range(8))]),
    volumes=(_host_path("dtj-gib", "/home/kubernetes/bin/gib"),),
    trainer_mounts=({"name": "dtj-gib", "mountPath": "/usr/local/gib"},),
    transport="gIB",
    preflight_floor_gbps=30.0,
)

PROFILES: Final = {
    NcclProfileName.TCP: TCP,
    NcclProfileName.GPUDIRECT_TCPX: GPUDIRECT_TCPX,
    NcclProfileName.GPUDIRECT_TCPXO: GPUDIRECT_TCPXO,
    NcclProfileName.RDMA: RDMA,
}


def profile_name(spec: DistributedTrainingJobSpec) -> NcclProfileName:
    if spec.nccl.profile != NcclProfileName.AUTO:
        return spec.nccl.profile
    accelerator_type = spec.accelerator.type if spec.accelerator else ""
    return AUTO_PROFILES.get(accelerator_type, NcclProfileName.TCP)


def profile(spec: DistributedTrainingJobSpec) -> NetworkProfile:
    return PROFILES[profile_name(spec)]


def nccl_env(spec: DistributedTrainingJobSpec) -> Env:
    """The profile's variables, NCCL_DEBUG, the PyTorch watchdog switch, then spec.nccl.env (which wins)."""
    env = dict(profile(spec).env)
    env["NCCL_DEBUG"] = spec.nccl.debug.value
    if spec.framework == Framework.PYTORCH:
        # A lost peer becomes an error that ends the process (and so restarts the gang), not a hang.
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
    env.update((e.name, e.value) for e in spec.nccl.env)
    return tuple(env.items())
