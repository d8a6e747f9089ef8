"""The NCCL network profiles as data: what a GPU pod gets under each (env, annotations, volumes, mounts,
the daemons beside the trainer), their shape on GKE Autopilot, and a profile as the job's machines need it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.gke.machines import FULL_MACHINE_GPUS, machine_of

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

    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Node labels its pods select besides the accelerator's."""

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
# DAEMON_NOT_READY_RESTARTS times without ever starting takes the node for bad (classify.py).
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
# by where pods see it, as it asks. The trainer runtime applies the script's exports beneath these (those
# the pod does not set: a newer plugin's additions; dtjob_trainer.nccl_env), as it does gIB's; a trainer
# that sources "$DTJ_NCCL_ENV_SCRIPT" in its shell gets the installed plugin's own values over these.
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
# on eth2..eth9, no gvnic-1), read 2026-11-23. Every Google recipe sources the env script of the gIB
# installed on the node, /usr/local/gib/scripts/set_nccl_env.sh, and overrides only the tuner config and
# the socket interfaces after it (gpu-recipes' A3 Ultra and A4 workload templates); Cluster Toolkit:
# "Replace any NCCL env hard coding/caches with set_nccl_env.sh sourcing" (tests/data/gke_recipes/rdma.yaml,
# read 2026-11-28). So the pod names the script (DTJ_NCCL_ENV_SCRIPT) and the trainer runtime applies its
# exports at start, in the trainer and in the NCCL preflight alike (dtjob_trainer.nccl_env), whatever
# their shell does. What the pod sets plainly wins over the script, as the recipes' overrides do: NCCL_NET
# (Cluster Toolkit's "Force use of libnccl-gib"), NCCL_SOCKET_IFNAME, the machine's tuner config
# (Machine.tuner_config) and spec.nccl.env. GIB_TUNING is only a fallback where the script is absent: the
# script is not published, and these are the values Google's Cluster Toolkit sets "to match what is in
# /usr/local/gib/scripts/set_nccl_env.sh" at gIB v1.1.0 (examples/machine-learning/a3-ultragpu-8g/
# nemo-framework/Dockerfile at 4f04afc1; the same values in its a4-highgpu-8g blueprint and GKE's verl
# tutorial), read 2026-11-26. They go into the pod under NCCL_FALLBACK_PREFIX, which NCCL does not read
# and the runtime uses only without the script. Only on the machines those sources are for (A3 Ultra,
# A4): none is published for A4X, whose recipes source the script alone.
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
# A fallback value's name in the pod (dtjob_trainer.nccl_env.FALLBACK_PREFIX): DTJ_NCCL_FALLBACK_NCCL_IB_TC.
NCCL_FALLBACK_PREFIX: Final = "DTJ_NCCL_FALLBACK_"
# The gIB plugin's own directory comes first on the trainer's library path, so that NCCL_NET=gIB finds it
# (gpu-recipes' A3 Ultra and A4 charts, Cluster Toolkit's NeMo Dockerfile; rdma.yaml): the loader reads
# LD_LIBRARY_PATH when the process starts, before the runtime applies the script.
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
# host's directories read-only. No Autopilot recipe is published for A4X or managed DRANET. The TCPX(O)
# recipes select nodes with GKE's latest GPU driver (cloud.google.com/gke-gpu-driver-version: latest). The
# daemon is Standard's: both installers install plugin v3.1.12 at 98c85a6e (v3.1.9 at 4aeee0d7, whose recipe
# ran v2.0.12), and the pass runs the pair of the plugin the cluster's installer installs (with_daemon).
AUTOPILOT_NAMESPACES: Final = frozenset({"gpudirect-system", "rdma-system"})


def _autopilot_daemon(sidecar: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    env = [e for e in sidecar["env"] if e["name"] != "LD_LIBRARY_PATH"]
    return {**sidecar, "env": env, **extra}


_LATEST_DRIVER: Final = {"cloud.google.com/gke-gpu-driver-version": "latest"}

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
        node_selector=_LATEST_DRIVER,
    ),
    NcclProfileName.GPUDIRECT_TCPXO: replace(
        GPUDIRECT_TCPXO,
        env=tuple((k, v) for k, v in GPUDIRECT_TCPXO.env if k != "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"),
        trainer_mounts=tuple(m for m in GPUDIRECT_TCPXO.trainer_mounts if m != _NVIDIA_LIBS_MOUNT),
        sidecars=(_autopilot_daemon(GPUDIRECT_TCPXO.sidecars[0]),),
        node_selector=_LATEST_DRIVER,
    ),
    NcclProfileName.RDMA: replace(
        RDMA,
        annotations=_interfaces(["gvnic-1", *(f"rdma-{i}" for i in range(8))]),
        trainer_mounts=tuple({**m, "readOnly": True} for m in RDMA.trainer_mounts),
    ),
}

PROFILES: Final = {
    NcclProfileName.TCP: TCP,
    NcclProfileName.GPUDIRECT_TCPX: GPUDIRECT_TCPX,
    NcclProfileName.GPUDIRECT_TCPXO: GPUDIRECT_TCPXO,
    NcclProfileName.RDMA: RDMA,
    NcclProfileName.MANAGED_RDMA: MANAGED_RDMA,
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
