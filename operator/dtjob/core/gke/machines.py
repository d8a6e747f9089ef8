"""The GKE GPU machine catalogue: each machine family by its accelerator type, and what Auto picks on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName

# GPUDirect moves data between GPUs on different machines over the machine's own GPU NICs: only a pod that
# holds all of a machine's GPUs gets all the NICs and the right NUMA bindings. A2/A3/A4 VMs have 8 GPUs
# (the daemons' device lists name 8), A4X 4 (Machine.gpus).
FULL_MACHINE_GPUS: Final = 8


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
# Keyed by the node label cloud.google.com/gke-accelerator, which is all dtjob sees of a machine, so machine types
# that share a label share a row (read 2026-11-28, sources in tests/data/gke_recipes/machines.yaml):
# A3 Edge (a3-edgegpu-8g) is labelled nvidia-h100-80gb like A3 High and runs GPUDirect-TCPX as it does
# (docs.cloud.google.com/ai-hypercomputer/docs/nccl/test-gke-custom-a3-edge); A4's a4-highgpu-8g-lowmem carries
# nvidia-b200 (the issue's; no page found). G4 (nvidia-rtx-pro-6000, 1/2/4/8 GPUs of 96 GB) is not here: no
# Google page found gives it a GPUDirect stack, so, like A2 and G2, Auto gives it TCP.
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


def machine_of(spec: DistributedTrainingJobSpec) -> Machine | None:
    return MACHINES.get(spec.accelerator.type) if spec.accelerator else None


def machine_gpus(spec: DistributedTrainingJobSpec) -> int:
    return machine.gpus if (machine := machine_of(spec)) else FULL_MACHINE_GPUS
