"""NCCL network profiles: the env, pod annotations, volumes and sidecar each GKE machine family needs.

Values follow GKE's GPUDirect guides (shared/reference/platform-facts.md §3.3). Network names (vpc1..,
gvnic-1, rdma-0..) are the ones those guides create; a cluster that names its networks differently
overrides the annotation in the pod template (template annotations win). Without this plumbing NCCL
silently falls back to TCP, 10-100x slower; with it on a cluster that lacks the networks, the pods never
start. So `Auto` picks a GPUDirect profile only where it can work (`choose`), and says why in status.nccl.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, NamedTuple

from dtjob.api import GPU_ROLES, DistributedTrainingJobSpec, Framework, NcclProfileName

Env = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class NetworkProfile:
    env: Env
    library_path: tuple[str, ...] = ()
    """Directories of the plugin and driver libraries, put first on the trainer's LD_LIBRARY_PATH."""
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

    device_class: str | None = None
    """The DRA DeviceClass the pods claim their GPU NICs from (all of the node's, one claim a pod) instead
    of attaching Network objects: GKE's managed DRANET."""

    @property
    def networks(self) -> tuple[str, ...]:
        """The GKE Network objects its interfaces annotation names, besides the pod network."""
        interfaces = json.loads(self.annotations.get(INTERFACES_ANNOTATION, "[]"))
        return tuple(i["network"] for i in interfaces if i["network"] != "default")

    @property
    def gpu_nics(self) -> bool:
        """Whether its pods have GPU NICs beside the pod network (attached Networks or claimed devices)."""
        return bool(self.networks) or self.device_class is not None


INTERFACES_ANNOTATION: Final = "networking.gke.io/interfaces"
# The GKE Network objects (cluster-scoped) that multi-network pods attach to; an admin creates them.
NETWORK_GROUP: Final = "networking.gke.io"
NETWORK_VERSION: Final = "v1"
NETWORK_PLURAL: Final = "networks"
# GPUDirect moves data between GPUs on different machines over the machine's own GPU NICs: only a pod that
# holds all of a machine's GPUs gets all the NICs and the right NUMA bindings. A2/A3/A4 VMs have 8 GPUs
# (the daemons' device lists name 8), A4X 4 (Machine.gpus).
FULL_MACHINE_GPUS: Final = 8
# What images built on nvidia/cuda set, where GKE mounts the driver's libraries; used after the
# profile's directories when the template sets no LD_LIBRARY_PATH (Kubernetes cannot see an image's env).
IMAGE_LIBRARY_PATH: Final = ("/usr/local/nvidia/lib", "/usr/local/nvidia/lib64")


def _interfaces(networks: list[str], first: int = 1) -> dict[str, str]:
    """Pod network on eth0, then each named Network on eth<first>, eth<first+1>, ..."""
    interfaces = [{"interfaceName": "eth0", "network": "default"}] + [
        {"interfaceName": f"eth{i}", "network": network} for i, network in enumerate(networks, start=first)
    ]
    return {
        "networking.gke.io/default-interface": "eth0",
        INTERFACES_ANNOTATION: json.dumps(interfaces, separators=(",", ":")),
    }


def _gpu_devices(container: str, *extra: str) -> dict[str, str]:
    """A daemon requests no GPU, so GKE injects the GPU devices it needs through this annotation."""
    paths = [
        *(f"/dev/nvidia{i}" for i in range(FULL_MACHINE_GPUS)),
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        *extra,
    ]
    return {f"devices.gke.io/container.{container}": "".join(f"- path: {path}\n" for path in paths)}


def _host_path(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


# Where the GKE installers put the NCCL plugin (next to the driver's libraries), and where pods see it.
NVIDIA_LIB_DIR: Final = "/usr/local/nvidia/lib64"
_NVIDIA_LIBS = _host_path("dtj-nvidia-libs", "/home/kubernetes/bin/nvidia/lib64")
_NVIDIA_LIBS_MOUNT: Final = {"name": "dtj-nvidia-libs", "mountPath": NVIDIA_LIB_DIR}
_SYS = _host_path("dtj-sys", "/sys")
_PROC_SYS = _host_path("dtj-proc-sys", "/proc/sys")
_DAEMON_MOUNTS: Final = (
    _NVIDIA_LIBS_MOUNT,
    {"name": "dtj-sys", "mountPath": "/hostsysfs"},
    {"name": "dtj-proc-sys", "mountPath": "/hostprocsysfs"},
)
_DAEMON_ENV: Final = ({"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB_DIR},)
_TCPX_SOCKET_MOUNT: Final = {"name": "dtj-tcpx-socket", "mountPath": "/run/tcpx"}
# The TCPXO daemon writes this file once it has initialised (typically ~30 s), never on a node whose host
# components are broken (container-engine-accelerators gpudirect-tcpxo/best-practice.md, "Setup Startup
# Probe for the TCPXO-daemon Sidecar", commit a2371aeb, read 2026-11-26; the name may hold no underscore).
# The probe on the native sidecar holds the preflight and the trainer back until it passes. Google's
# example allows 30 s (6 x 5 s), the time a start typically takes; dtjob allows twice that, so a slow
# start is not a restart. Past it the kubelet restarts the daemon, and an operator that sees it restarted
# DAEMON_NOT_READY_RESTARTS times without ever starting takes the node for bad (observed.py).
HEALTH_CHECK_FILE: Final = "/run/health-check"
_TCPXO_STARTUP_PROBE: Final = {
    "exec": {"command": ["cat", HEALTH_CHECK_FILE]},
    "initialDelaySeconds": 1,
    "periodSeconds": 5,
    "timeoutSeconds": 1,
    "successThreshold": 1,
    "failureThreshold": 12,
}
DAEMON_NOT_READY_RESTARTS: Final = 2

TCP: Final = NetworkProfile(env=(("NCCL_SOCKET_IFNAME", "eth0"),))

# A3 High. GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpx/nccl-test-latest.yaml and
# README.md "NCCL configs" at commit 98c85a6e (release of 2026-06-22), read 2026-11-23; the recipe's facts,
# and where dtjob departs from them and why, are in tests/data/gke_recipes/gpudirect-tcpx.yaml and the
# golden test tests/unit/test_gke_recipes.py.
GPUDIRECT_TCPX: Final = NetworkProfile(
    env=(
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("NCCL_ALGO", "Ring,Tree"),
        ("NCCL_PROTO", "Simple"),
        ("NCCL_CROSS_NIC", "0"),
        ("NCCL_NET_GDR_LEVEL", "PIX"),
        ("NCCL_P2P_PXN_LEVEL", "0"),
        ("NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", "eth1,eth2,eth3,eth4"),
        ("NCCL_GPUDIRECTTCPX_CTRL_DEV", "eth0"),
        ("NCCL_DYNAMIC_CHUNK_SIZE", "524288"),
        ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
        ("NCCL_P2P_PCI_CHUNKSIZE", "524288"),
        ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"),
        ("NCCL_BUFFSIZE", "4194304"),
        ("NCCL_NSOCKS_PERTHREAD", "4"),
        ("NCCL_SOCKET_NTHREADS", "1"),
        (
            "NCCL_GPUDIRECTTCPX_TX_BINDINGS",
            "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177",
        ),
        (
            "NCCL_GPUDIRECTTCPX_RX_BINDINGS",
            "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191",
        ),
        ("NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS", "500000"),
        # The daemon's socket directory, where the trainer mounts it (the recipe mounts it over /tmp).
        ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "/run/tcpx"),
    ),
    library_path=(NVIDIA_LIB_DIR,),
    annotations={**_interfaces(["vpc1", "vpc2", "vpc3", "vpc4"]), **_gpu_devices("tcpx-daemon")},
    volumes=(_NVIDIA_LIBS, _SYS, _PROC_SYS, _host_path("dtj-tcpx-socket", "/run/tcpx")),
    trainer_mounts=(_NVIDIA_LIBS_MOUNT, _TCPX_SOCKET_MOUNT),
    sidecars=(
        {
            "name": "tcpx-daemon",
            "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.15",
            "restartPolicy": "Always",
            "command": [
                "/tcpgpudmarxd/build/app/tcpgpudmarxd",
                *("--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd", "--uds_path", "/run/tcpx"),
                *("--setup_param", '\\"--verbose 128 2 0 \\"'),
            ],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
            "env": list(_DAEMON_ENV),
            "volumeMounts": [*_DAEMON_MOUNTS, _TCPX_SOCKET_MOUNT],
        },
    ),
    transport="GPUDirectTCPX",
    preflight_floor_gbps=10.0,
)

# A3 Mega, read 2026-11-23 (tests/data/gke_recipes/gpudirect-tcpxo.yaml names every file and commit). Two
# sources: the env is the newest "NCCL configs" list seen, the README's text as of its Jun 26, 2026 release
# notes (only a fork's copy carries them; NCCL_NET_PLUGIN_TELEMETRY_MODE is the one variable the upstream
# copy of Jan 9, 2026, commit 0a2b482e, lacks); the pod shape is upstream nccl-test-latest.yaml (commit
# ced6fa74); the daemon is the newest upstream release's (v1.0.21, Jan 9, 2026; the fork's notes name
# v1.0.23): it must match the plugin the admin's installer put on the node, hence overridable (chart,
# job). The env is what the installer's nccl-env-profile.sh sets, with the README's lib directory replaced
# by where pods see it, as it asks; a trainer that sources "$DTJ_NCCL_ENV_SCRIPT" gets the installed
# plugin's own values instead.
GPUDIRECT_TCPXO: Final = NetworkProfile(
    env=(
        ("NCCL_LIB_DIR", NVIDIA_LIB_DIR),
        ("DTJ_NCCL_ENV_SCRIPT", f"{NVIDIA_LIB_DIR}/nccl-env-profile.sh"),
        ("NCCL_FASTRAK_IFNAME", "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8"),
        ("NCCL_FASTRAK_CTRL_DEV", "eth0"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("NCCL_CROSS_NIC", "0"),
        ("NCCL_PROTO", "Simple,LL128"),
        ("NCCL_MIN_NCHANNELS", "4"),
        # The plugin's guest config checker aborts any workload without it (README, 2025-08-21 on).
        ("NCCL_NVLSTREE_MAX_CHUNKSIZE", "131072"),
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
        ("NCCL_TUNER_CONFIG_PATH", f"{NVIDIA_LIB_DIR}/a3plus_tuner_config.textproto"),
        ("NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE", f"{NVIDIA_LIB_DIR}/a3plus_guest_config.textproto"),
        ("NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS", "600000"),
        ("NCCL_NVLS_ENABLE", "1"),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV,COLL,GRAPH"),
        ("NCCL_NET_PLUGIN_TELEMETRY_MODE", "0"),
        ("NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", "/dev/aperture_devices"),
    ),
    library_path=(NVIDIA_LIB_DIR,),
    annotations={
        **_interfaces([f"vpc{i}" for i in range(1, 9)]),
        **_gpu_devices("tcpxo-daemon", "/dev/dmabuf_import_helper"),
    },
    volumes=(_NVIDIA_LIBS, _SYS, _PROC_SYS, _host_path("dtj-aperture-devices", "/dev/aperture_devices")),
    trainer_mounts=(
        _NVIDIA_LIBS_MOUNT,
        {"name": "dtj-aperture-devices", "mountPath": "/dev/aperture_devices"},
    ),
    sidecars=(
        {
            "name": "tcpxo-daemon",
            # Coupled to the plugin the admin's nccl-tcpxo-installer put on the node: pin the pair.
            "image": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21",
            "restartPolicy": "Always",
            "command": ["/bin/sh", "-c"],
            "args": [
                "set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n/fts/entrypoint_rxdm_container.sh --num_hops=2\n"
            ],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
            "env": [*_DAEMON_ENV, {"name": "HEALTH_CHECK_LOG_FILE", "value": HEALTH_CHECK_FILE}],
            "startupProbe": _TCPXO_STARTUP_PROBE,
            "volumeMounts": list(_DAEMON_MOUNTS),
        },
    ),
    transport="FasTrak",
    preflight_floor_gbps=20.0,
)

# A3 Ultra and A4. container-engine-accelerators gpudirect-rdma/nccl-test.yaml (commit 0920249d: rdma-0..7
# on eth2..eth9, no gvnic-1), read 2026-11-23. The recipe's shell sources set_nccl_env.sh, which is not
# published; the gIB tuning below is what Google's Cluster Toolkit sets "to match what is in
# /usr/local/gib/scripts/set_nccl_env.sh" (examples/machine-learning/a3-ultragpu-8g/nemo-framework/Dockerfile
# at 4f04afc1; the same values in its a4-highgpu-8g blueprint and GKE's verl tutorial), read 2026-11-26
# (tests/data/gke_recipes/rdma.yaml). Set here, not sourced, so that the trainer and the NCCL preflight
# (which copies the trainer's env) run the same NCCL whatever their shell does; the tuner config is per
# machine (Machine.tuner_config, as the recipes override it after sourcing). Only on the machines those
# sources are for (A3 Ultra, A4): none is published for A4X, whose recipes source the script alone.
GIB_TUNING: Final = (
    ("NCCL_CROSS_NIC", "0"),
    ("NCCL_NET_GDR_LEVEL", "PIX"),
    ("NCCL_P2P_NET_CHUNKSIZE", "131072"),
    ("NCCL_NVLS_CHUNKSIZE", "524288"),
    ("NCCL_IB_ADAPTIVE_ROUTING", "1"),
    ("NCCL_IB_QPS_PER_CONNECTION", "4"),
    ("NCCL_IB_TC", "52"),
    ("NCCL_IB_FIFO_TC", "84"),
)
# The gIB plugin's own directory comes first on the trainer's library path, so that NCCL_NET=gIB finds
# it without the script (gpu-recipes' A3 Ultra and A4 charts, Cluster Toolkit's NeMo Dockerfile; rdma.yaml).
GIB_LIB_DIR: Final = "/usr/local/gib/lib64"
RDMA: Final = NetworkProfile(
    env=(
        ("NCCL_NET", "gIB"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("DTJ_NCCL_ENV_SCRIPT", "/usr/local/gib/scripts/set_nccl_env.sh"),
    ),
    library_path=(GIB_LIB_DIR, NVIDIA_LIB_DIR),
    annotations=_interfaces([f"rdma-{i}" for i in range(8)], first=2),
    volumes=(
        _host_path("dtj-nvidia-dir", "/home/kubernetes/bin/nvidia"),
        _host_path("dtj-gib", "/home/kubernetes/bin/gib"),
    ),
    trainer_mounts=(
        {"name": "dtj-nvidia-dir", "mountPath": "/usr/local/nvidia"},
        {"name": "dtj-gib", "mountPath": "/usr/local/gib"},
    ),
    transport="gIB",
    preflight_floor_gbps=30.0,
)

# RDMA with GKE's managed DRANET: a node pool with DRANET enabled (GKE 1.34.1-gke.1829001 or later,
# Dataplane V2) hands its RDMA NICs out through DRA, and GKE installs the DeviceClass mrdma.google.com; a
# pod claims all of its node's (allocationMode All) with a ResourceClaimTemplate and attaches no Network
# objects (the pool has none: Cluster Toolkit refuses additional_networks with enable_dranet). Cluster
# Toolkit modules/compute/gke-node-pool (resource-claim-template.yaml.tftpl, main.tf) and
# examples/gke-a4x/nccl-jobset-example.yaml at d1236e22, read 2026-11-26
# (tests/data/gke_recipes/rdma-dranet.yaml). The rest (gIB, its libraries, the tuning) is RDMA's.
MANAGED_RDMA_DEVICE_CLASS: Final = "mrdma.google.com"
MANAGED_RDMA: Final = replace(
    RDMA,
    annotations={"networking.gke.io/default-interface": "eth0"},
    device_class=MANAGED_RDMA_DEVICE_CLASS,
)
RDMA_PROFILES: Final = frozenset({NcclProfileName.RDMA, NcclProfileName.MANAGED_RDMA})


# GKE Autopilot runs the same recipes with a few changes (container-engine-accelerators'
# gpudirect-tcpx/nccl-test-latest-autopilot.yaml at 123606f3, gpudirect-tcpxo/nccl-test-latest-autopilot.yaml
# at 992db812, gpudirect-rdma/nccl-test-autopilot.yaml and nccl-test-a4-autopilot.yaml at 155bfa49, read
# 2026-11-26; tests/data/gke_recipes/autopilot.yaml): GKE mounts the driver's directory (where the
# installers put the plugin) into GPU containers itself, so the trainer mounts no host libraries and the
# daemons set no LD_LIBRARY_PATH; TCPX's daemon requests its resources and shares its socket through an
# emptyDir; TCPXO's trainer gets no LLCM directory variable; RDMA keeps gvnic-1 on eth1 and mounts the
# host's directories read-only. No Autopilot recipe is published for A4X or managed DRANET.
AUTOPILOT_NAMESPACES: Final = frozenset({"gpudirect-system", "rdma-system"})


def _autopilot_daemon(sidecar: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    env = [e for e in sidecar["env"] if e["name"] != "LD_LIBRARY_PATH"]
    return {**sidecar, "env": env, **extra}


AUTOPILOT_PROFILES: Final = {
    NcclProfileName.GPUDIRECT_TCPX: replace(
        GPUDIRECT_TCPX,
        volumes=(_NVIDIA_LIBS, _SYS, _PROC_SYS, {"name": "dtj-tcpx-socket", "emptyDir": {}}),
        trainer_mounts=(_TCPX_SOCKET_MOUNT,),
        sidecars=(
            _autopilot_daemon(
                GPUDIRECT_TCPX.sidecars[0],
                resources={"requests": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "10Gi"}},
            ),
        ),
    ),
    NcclProfileName.GPUDIRECT_TCPXO: replace(
        GPUDIRECT_TCPXO,
        env=tuple((k, v) for k, v in GPUDIRECT_TCPXO.env if k != "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"),
        trainer_mounts=tuple(m for m in GPUDIRECT_TCPXO.trainer_mounts if m != _NVIDIA_LIBS_MOUNT),
        sidecars=(_autopilot_daemon(GPUDIRECT_TCPXO.sidecars[0]),),
    ),
    NcclProfileName.RDMA: replace(
        RDMA,
        annotations=_interfaces(["gvnic-1", *(f"rdma-{i}" for i in range(8))]),
        trainer_mounts=tuple({**m, "readOnly": True} for m in RDMA.trainer_mounts),
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


@dataclass(frozen=True)
class Machine:
    """A GKE GPU machine family, by the accelerator type its nodes are labelled with."""

    name: str
    gpus: int
    """GPUs per machine: a GPUDirect pod holds all of them."""
    profile: NcclProfileName
    """Its GPU network: what Auto picks on it."""
    rdma_nics: int = 8
    """For RDMA: the GPU NICs (rdma-0.. on eth2..)."""
    tuner_config: str | None = None
    """For RDMA: the gIB tuner's config, as Google's recipes set it after sourcing set_nccl_env.sh
    (AI-Hypercomputer/gpu-recipes a4 and a3ultra workload templates; GKE's verl tutorial), read
    2026-11-26. None where no recipe sets one (A4X sources the script alone)."""
    arm64: bool = False
    """Arm nodes, which GKE taints kubernetes.io/arch=arm64:NoSchedule."""


# A4X: ai-hypercomputer/docs/create/gke-ai-hypercompute-custom-a4x ("Last updated 2026-04-06"): 4 GPUs,
# Arm Grace CPUs, rdma-0..3; container-engine-accelerators gpudirect-rdma/nccl-test-imex-a4x.yaml at
# 155bfa49 (rdma-0..3 on eth2..eth5); read 2026-11-26 (tests/data/gke_recipes/rdma-a4x.yaml).
MACHINES: Final = {
    m.name: m
    for m in (
        Machine("nvidia-h100-80gb", 8, NcclProfileName.GPUDIRECT_TCPX),  # A3 High
        Machine("nvidia-h100-mega-80gb", 8, NcclProfileName.GPUDIRECT_TCPXO),  # A3 Mega
        Machine(
            "nvidia-h200-141gb",
            8,
            NcclProfileName.RDMA,
            tuner_config="/usr/local/gib/configs/tuner_config_a3u.txtpb",
        ),  # A3 Ultra
        Machine(
            "nvidia-b200",
            8,
            NcclProfileName.RDMA,
            tuner_config="/usr/local/gib/configs/tuner_config_a4.txtpb",
        ),  # A4
        Machine("nvidia-gb200", 4, NcclProfileName.RDMA, rdma_nics=4, arm64=True),  # A4X
    )
}
AUTO_PROFILES: Final = {name: machine.profile for name, machine in MACHINES.items()}
# torch.distributed's gloo groups (CPU collectives, the rendezvous's barrier) on the pod network: a pod
# with GPU NICs has several interfaces, and gloo would take whichever its hostname resolves to. Google's
# recipes set it for A3 Mega, A4 and A4X (gpu-recipes, cluster-toolkit, GKE's verl tutorial).
GLOO_ON_POD_NETWORK: Final = ("GLOO_SOCKET_IFNAME", "eth0")

PROFILES: Final = {
    NcclProfileName.TCP: TCP,
    NcclProfileName.GPUDIRECT_TCPX: GPUDIRECT_TCPX,
    NcclProfileName.GPUDIRECT_TCPXO: GPUDIRECT_TCPXO,
    NcclProfileName.RDMA: RDMA,
    NcclProfileName.MANAGED_RDMA: MANAGED_RDMA,
}
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

# The receive daemons the profiles run beside the trainer: one that never starts is its node's fault.
DAEMON_SIDECARS: Final = frozenset(str(s["name"]) for p in PROFILES.values() for s in p.sidecars)


def profile_for(
    name: NcclProfileName, spec: DistributedTrainingJobSpec, autopilot: bool = False
) -> NetworkProfile:
    """The profile as the job's machines need it: RDMA attaches as many NICs as the machine has; on
    Autopilot, the shape of its recipes (for the machines they are published for: 8 GPU NICs)."""
    profile = PROFILES[name]
    machine = machine_of(spec)
    if autopilot and name in AUTOPILOT_PROFILES and (machine is None or machine.rdma_nics == 8):
        return AUTOPILOT_PROFILES[name]
    if name == NcclProfileName.RDMA and machine is not None and machine.rdma_nics != 8:
        return replace(
            profile, annotations=_interfaces([f"rdma-{i}" for i in range(machine.rdma_nics)], first=2)
        )
    return profile


def machine_of(spec: DistributedTrainingJobSpec) -> Machine | None:
    return MACHINES.get(spec.accelerator.type) if spec.accelerator else None


def machine_gpus(spec: DistributedTrainingJobSpec) -> int:
    return machine.gpus if (machine := machine_of(spec)) else FULL_MACHINE_GPUS


@dataclass(frozen=True)
class NetworkChoice:
    """The profile an attempt's pods get, and why (status.nccl keeps both)."""

    profile: NcclProfileName
    reason: str
    degraded: bool = False
    """A Warning Event says so: TCP although the machines have a GPUDirect network, only for want of the
    cluster's Networks or installers (NCCL then runs 10-100x slower than it could), or a TCPXO daemon that
    does not pair with the cluster's plugin."""
    autopilot: bool = False
    """The pods take the shape of GKE's Autopilot recipes (AUTOPILOT_PROFILES)."""


def _in_cluster_shape(
    choice: NetworkChoice, spec: DistributedTrainingJobSpec, autopilot: bool
) -> NetworkChoice:
    """The choice on an Autopilot cluster, for a profile that has an Autopilot shape there: said."""
    if not autopilot or profile_for(choice.profile, spec, True) == profile_for(choice.profile, spec):
        return choice
    namespaces = ", ".join(sorted(AUTOPILOT_NAMESPACES))
    reason = f"{choice.reason}; in Autopilot's shape (its GPUDirect installers run in {namespaces})"
    return replace(choice, reason=reason, autopilot=True)


def candidate(spec: DistributedTrainingJobSpec) -> NcclProfileName:
    """The profile the spec asks for: its own, or for Auto the one its accelerator type's machines have."""
    if spec.nccl.profile != NcclProfileName.AUTO:
        return spec.nccl.profile
    accelerator_type = spec.accelerator.type if spec.accelerator else ""
    return AUTO_PROFILES.get(accelerator_type, NcclProfileName.TCP)


def needs_networks(spec: DistributedTrainingJobSpec) -> bool:
    """Whether choosing needs to know which Network objects (and DRA DeviceClasses) the cluster has."""
    return spec.accelerator is not None and profile_for(candidate(spec), spec).gpu_nics


def gpu_pods(spec: DistributedTrainingJobSpec) -> int:
    return sum(spec.replica(role).count for role in spec.roles() if role in GPU_ROLES)


def choose(
    spec: DistributedTrainingJobSpec,
    cluster_networks: frozenset[str],
    daemonsets: frozenset[str] | None = None,
    device_classes: frozenset[str] = frozenset(),
    autopilot: bool = False,
) -> NetworkChoice:
    """Auto's decision. GPUDirect only where it can work and helps: a GPUDirect machine type, all of its
    GPUs in each pod, more than one GPU pod (one pod's GPUs talk over NVLink), the Network objects its
    interfaces attach to present in the cluster (on RDMA machines without them: ManagedRDMA where the
    cluster has the DeviceClass of GKE's managed DRANET, among `device_classes`), and its PREREQUISITES
    running (`daemonsets`: those the cluster runs, of PREREQUISITE_DAEMONSETS; None when they could not be
    read: not judged). Anything else is TCP, with the reason. An explicit profile is taken as it is
    (`missing_networks` and `missing_device_class` tell whether it can start). `autopilot`: the cluster
    runs Autopilot's installers (on_autopilot), whose pods attach one more Network on RDMA machines."""
    wanted = candidate(spec)
    if spec.nccl.profile != NcclProfileName.AUTO:
        return _in_cluster_shape(NetworkChoice(wanted, f"spec.nccl.profile is {wanted}"), spec, autopilot)
    accelerator = spec.accelerator
    if accelerator is None:
        return NetworkChoice(NcclProfileName.TCP, "no accelerator: no GPU network to set up")
    if wanted == NcclProfileName.TCP:
        return NetworkChoice(NcclProfileName.TCP, f"{accelerator.type} machines have no GPUDirect network")
    fallback = f"TCP instead of {wanted} on {accelerator.type}"
    gpus = machine_gpus(spec)
    if accelerator.count != gpus:
        return NetworkChoice(
            NcclProfileName.TCP,
            f"{fallback}: each pod asks for {accelerator.count} GPUs, GPUDirect needs the whole machine "
            f"({gpus}, accelerator.count)",
        )
    if (pods := gpu_pods(spec)) < 2:
        return NetworkChoice(
            NcclProfileName.TCP, f"{fallback}: {pods} GPU pod, whose GPUs talk over NVLink without a network"
        )
    missing = missing_networks(spec, wanted, cluster_networks, autopilot)
    if missing and wanted == NcclProfileName.RDMA and MANAGED_RDMA_DEVICE_CLASS in device_classes:
        wanted, missing = NcclProfileName.MANAGED_RDMA, ()
    if missing:
        dranet = (
            f" nor GKE's managed DRANET (DeviceClass {MANAGED_RDMA_DEVICE_CLASS})"
            if wanted == NcclProfileName.RDMA
            else ""
        )
        return NetworkChoice(
            NcclProfileName.TCP,
            f"{fallback}: the cluster lacks the Network objects ({NETWORK_GROUP}) {', '.join(missing)} "
            f"that its interfaces attach to{dranet} (see docs/gke.md)",
            degraded=True,
        )
    if daemonsets is not None and (absent := [n for n in PREREQUISITES[wanted] if n not in daemonsets]):
        said = ", ".join(f"{name} ({PREREQUISITES[wanted][name]})" for name in absent)
        return NetworkChoice(
            NcclProfileName.TCP,
            f"{fallback}: the cluster runs no DaemonSet {said} in {', '.join(PREREQUISITE_NAMESPACES)}, "
            "which GKE's GPUDirect guides install (see docs/gke.md)",
            degraded=True,
        )
    profile = profile_for(wanted, spec, autopilot)
    nics = (
        f"their NICs claimed from GKE's managed DRANET (DeviceClass {profile.device_class})"
        if profile.device_class is not None
        else f"Networks {profile.networks[0]}..{profile.networks[-1]} present"
    )
    return _in_cluster_shape(
        NetworkChoice(wanted, f"{pods} pods of {gpus} {accelerator.type} GPUs, {nics}"), spec, autopilot
    )


def daemon_mismatch(
    name: NcclProfileName, daemon_image: str | None, installers: Mapping[str, Installer]
) -> str | None:
    """Why the TCPXO daemon the pods get does not pair with the NCCL plugin the cluster's installer
    DaemonSet installs (`installers`: by DaemonSet name); None when it pairs, or when the installer, its
    plugin version or the pairing is unknown."""
    if name != NcclProfileName.GPUDIRECT_TCPXO:
        return None
    daemon = daemon_image or str(PROFILES[name].sidecars[0]["image"])
    installer = installers.get(TCPXO_INSTALLER)
    images = installer.images if installer is not None else ()
    plugins = [tag for name, tag in map(_name_and_tag, images) if name == TCPXO_PLUGIN_IMAGE]
    if not plugins or (paired := TCPXO_DAEMON_FOR_PLUGIN.get(plugins[0])) is None:
        return None
    if _name_and_tag(daemon)[1] == paired:
        return None
    return (
        f"the daemon {daemon} does not pair with the NCCL plugin {plugins[0]} that the cluster's "
        f"{TCPXO_INSTALLER} installs: that plugin pairs with daemon {paired} (GKE's TCPXO release notes); "
        "set spec.nccl.daemonImage, or the chart's nccl.daemonImages.tcpxo, to the daemon of that tag "
        "(docs/gke.md)"
    )


def _name_and_tag(image: str) -> tuple[str, str]:
    """An image reference's last path segment and its tag ("" without one), any digest dropped."""
    name, _, tag = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")
    return name, tag


def missing_networks(
    spec: DistributedTrainingJobSpec,
    name: NcclProfileName,
    cluster_networks: frozenset[str],
    autopilot: bool = False,
) -> tuple[str, ...]:
    return tuple(n for n in profile_for(name, spec, autopilot).networks if n not in cluster_networks)


def missing_device_class(name: NcclProfileName, device_classes: frozenset[str]) -> str | None:
    """The DeviceClass the profile claims NICs from, when the cluster lacks it."""
    wanted = PROFILES[name].device_class
    return wanted if wanted is not None and wanted not in device_classes else None


def nccl_env(spec: DistributedTrainingJobSpec, name: NcclProfileName, autopilot: bool = False) -> Env:
    """The profile's variables (an RDMA machine's tuner config, gloo on the pod network where the pod has
    GPU NICs), NCCL_DEBUG, the PyTorch watchdog switch, then spec.nccl.env (which wins)."""
    env = dict(profile_for(name, spec, autopilot).env)
    machine = machine_of(spec)
    if name in RDMA_PROFILES and machine is not None and machine.tuner_config is not None:
        env.update(GIB_TUNING)
        env["NCCL_TUNER_CONFIG_PATH"] = machine.tuner_config
    if PROFILES[name].gpu_nics:
        env.update((GLOO_ON_POD_NETWORK,))
    env["NCCL_DEBUG"] = spec.nccl.debug.value
    if spec.framework == Framework.PYTORCH:
        # A lost peer becomes an error that ends the process (and so restarts the gang), not a hang.
        env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
    env.update((e.name, e.value) for e in spec.nccl.env)
    return tuple(env.items())


def library_path(name: NcclProfileName, template_value: str | None) -> str | None:
    """LD_LIBRARY_PATH: the profile's directories, then the template's value (else what CUDA images set),
    without repeats; None when the profile needs none."""
    first = PROFILES[name].library_path
    if not first:
        return None
    rest = template_value.split(":") if template_value else list(IMAGE_LIBRARY_PATH)
    return ":".join(dict.fromkeys(d for d in [*first, *rest] if d))
