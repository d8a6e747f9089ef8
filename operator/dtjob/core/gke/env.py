"""The environment a GPU trainer gets from its network profile: NCCL's variables and LD_LIBRARY_PATH."""

from __future__ import annotations

from typing import Final

from dtjob.api import DistributedTrainingJobSpec, Framework, NcclProfileName
from dtjob.core.gke.machines import machine_of
from dtjob.core.gke.profiles import (
    GIB_TUNING,
    NCCL_FALLBACK_PREFIX,
    PROFILES,
    RDMA_PROFILES,
    Env,
    profile_for,
)

# What images built on nvidia/cuda set, where GKE mounts the driver's libraries; used after the
# profile's directories when the template sets no LD_LIBRARY_PATH (Kubernetes cannot see an image's env).
IMAGE_LIBRARY_PATH: Final = ("/usr/local/nvidia/lib", "/usr/local/nvidia/lib64")
# torch.distributed's gloo groups (CPU collectives, the rendezvous's barrier) on the pod network: a pod
# with GPU NICs has several interfaces, and gloo would take whichever its hostname resolves to. Google's
# recipes set it for A3 Mega, A4 and A4X (gpu-recipes, cluster-toolkit, GKE's verl tutorial).
GLOO_ON_POD_NETWORK: Final = ("GLOO_SOCKET_IFNAME", "eth0")
# G4 (1, 2, 4 or 8 RTX PRO 6000 GPUs a machine) has no GPUDirect stack, and its GPUs reach each other over
# PCIe: Cluster Toolkit's G4 NCCL test sets NCCL_P2P_LEVEL PHB, and SYS on the 8-GPU g4-standard-384
# (examples/gke-g4/nccl-test.yaml at 53c1f52b and README.md at ccdb8458, read 2026-12-07). A pod of 8
# GPUs is on an 8-GPU machine; dtjob cannot see the machine of a smaller pod, and takes PHB.
G4_ACCELERATOR: Final = "nvidia-rtx-pro-6000"


def nccl_env(spec: DistributedTrainingJobSpec, name: NcclProfileName, autopilot: bool = False) -> Env:
    """The profile's variables (an RDMA machine's tuner config and gIB fallback tuning, gloo on the pod
    network where the pod has GPU NICs, G4's NCCL_P2P_LEVEL), NCCL_DEBUG, the PyTorch watchdog switch, then spec.nccl.env
    (which wins)."""
    env = dict(profile_for(name, spec, autopilot).env)
    machine = machine_of(spec)
    if name in RDMA_PROFILES and machine is not None and machine.tuner_config is not None:
        env.update((f"{NCCL_FALLBACK_PREFIX}{variable}", value) for variable, value in GIB_TUNING)
        env["NCCL_TUNER_CONFIG_PATH"] = machine.tuner_config
    if PROFILES[name].gpu_nics:
        env.update((GLOO_ON_POD_NETWORK,))
    if spec.accelerator is not None and spec.accelerator.type == G4_ACCELERATOR:
        env["NCCL_P2P_LEVEL"] = "SYS" if spec.accelerator.count == 8 else "PHB"
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
