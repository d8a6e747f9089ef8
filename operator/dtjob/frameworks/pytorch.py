"""PyTorch: env:// rendezvous for one process per pod, and torchrun's PET_* flags for nproc per pod."""

from __future__ import annotations

from dtjob.api import DistributedTrainingJobSpec
from dtjob.frameworks.base import Env
from dtjob.frameworks.gang import Gang, Member


class PyTorchWiring:
    port_name = "torch"

    def port(self, spec: DistributedTrainingJobSpec) -> int:
        return spec.torch.port

    def env(self, gang: Gang, member: Member) -> Env:
        master, port = gang.rank_zero.host, str(self.port(gang.spec))
        # WORLD_SIZE counts pods: right for `python train.py`; torchrun recomputes it from PET_* for its workers.
        world_size, rank = str(len(gang.members)), str(member.rank)
        return [
            ("MASTER_ADDR", master),
            ("MASTER_PORT", port),
            ("WORLD_SIZE", world_size),
            ("RANK", rank),
            ("NODE_RANK", rank),
            ("LOCAL_RANK", "0"),
            ("PET_NNODES", world_size),
            ("PET_NPROC_PER_NODE", nproc_per_node(gang.spec)),
            ("PET_NODE_RANK", rank),
            ("PET_MASTER_ADDR", master),
            ("PET_MASTER_PORT", port),
        ]


def nproc_per_node(spec: DistributedTrainingJobSpec) -> str:
    """torchrun's own `auto` would start one process per CPU on a CPU pod; one per GPU, else one, is meant."""
    if spec.torch.nproc_per_node != "auto":
        return str(spec.torch.nproc_per_node)
    return str(spec.accelerator.count if spec.accelerator else 1)
