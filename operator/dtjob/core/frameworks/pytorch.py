"""PyTorch: env:// rendezvous for one process per pod, torchrun's PET_* flags for nproc per pod, and
torchrun's c10d rendezvous for an elastic gang."""

from __future__ import annotations

from typing import Final

from dtjob.api import DistributedTrainingJobSpec
from dtjob.core.frameworks.base import Env
from dtjob.core.gang import Gang, Member

# How long a pod's torchrun waits for the rendezvous host's store to answer (its default, 60 s, is shorter
# than an image pull on a fresh node).
RDZV_READ_TIMEOUT_SECONDS: Final = 300


class PyTorchWiring:
    port_name = "torch"

    def port(self, spec: DistributedTrainingJobSpec) -> int:
        return spec.torch.port

    def env(self, gang: Gang, member: Member) -> Env:
        master, port = gang.rendezvous_host, str(self.port(gang.spec))
        if (elastic := gang.spec.torch.elastic) is not None:
            # torchrun's c10d rendezvous, hosted by Worker 0's torchrun (the endpoint names its host), hands
            # out ranks and the world size afresh each time members join or leave: no rank is fixed here.
            most = elastic.max_replicas or len(gang.members)
            return [
                ("PET_NNODES", f"{elastic.min_replicas}:{most}"),
                ("PET_NPROC_PER_NODE", nproc_per_node(gang.spec)),
                ("PET_RDZV_BACKEND", "c10d"),
                ("PET_RDZV_ENDPOINT", f"{master}:{port}"),
                ("PET_RDZV_ID", f"{gang.job.name}-{gang.attempt}"),
                # Said, not guessed from DNS (which may not resolve Worker 0 yet when it starts); clients wait
                # for a host that starts late (image pull) up to read_timeout.
                (
                    "PET_RDZV_CONF",
                    f"is_host={int(member.rank == 0)},read_timeout={RDZV_READ_TIMEOUT_SECONDS}",
                ),
                ("PET_MAX_RESTARTS", str(elastic.max_restarts)),
                # Each round's rank 0 hosts a fresh store for its workers. The store torchrun shares by
                # default outlives rounds with no per-round prefix: a group restarted on fewer (or more)
                # members read the last group's addresses (gloo: connection refused; torch 2.15).
                ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),
            ]
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
