"""The members of a job's gang in rank order: who is rank 0, and what each pod is called and reached at."""

from __future__ import annotations

from dataclasses import dataclass

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName, Role
from dtjob.core.gke import choose
from dtjob.core.names import JobRef, pod_dns_name, pod_name


@dataclass(frozen=True)
class Member:
    role: Role
    index: int
    """Index within the role."""
    rank: int
    """Position in the gang: roles in the framework's order, then index."""
    pod: str
    host: str
    """DNS name under the headless Service."""


@dataclass(frozen=True)
class Gang:
    job: JobRef
    spec: DistributedTrainingJobSpec
    attempt: int
    members: tuple[Member, ...]
    network: NcclProfileName
    """The NCCL network profile of its GPU pods, as chosen for the attempt (see gke.choose)."""
    daemon_image: str | None = None
    """The GPUDirect daemon's image, when not the profile's."""
    progress_url: str | None = None
    """Where the pods report their training progress (the operator's intake), None when nowhere."""
    avoided_nodes: tuple[str, ...] = ()
    """Nodes the pods are kept off (status.avoidedNodes: slow ranks' nodes)."""
    autopilot: bool = False
    """The pods run in GKE's Autopilot mode (network.in_autopilot_mode): what Autopilot forbids is kept out
    of them, and the GPU pods take the shape of GKE's Autopilot recipes (gke.profile_for)."""
    rendezvous_pod: str | None = None
    """The pod that holds rank 0 when it is not rank 0's own (a hot spare took the rank); None otherwise."""

    @classmethod
    def of(
        cls,
        job: JobRef,
        spec: DistributedTrainingJobSpec,
        attempt: int,
        network: NcclProfileName | None = None,
        daemon_image: str | None = None,
    ) -> Gang:
        """`network`: the profile chosen for the attempt; by default the spec's, or Auto's choice on a
        cluster without GPUDirect Network objects. `daemon_image`: the attempt's GPUDirect daemon
        (network.attempt_network), by default spec.nccl.daemonImage. The fields derived from nothing here (progress_url,
        avoided_nodes, autopilot) keep their defaults: `dataclasses.replace` sets them."""
        pairs = [(role, index) for role in spec.roles() for index in range(spec.replica(role).count)]
        members = tuple(
            Member(
                role=role,
                index=index,
                rank=rank,
                pod=(pod := pod_name(job.name, role, index)),
                host=pod_dns_name(pod, job),
            )
            for rank, (role, index) in enumerate(pairs)
        )
        if network is None:
            network = choose(spec, frozenset()).profile
        return cls(
            job=job,
            spec=spec,
            attempt=attempt,
            members=members,
            network=network,
            daemon_image=daemon_image or spec.nccl.daemon_image,
        )

    @property
    def rank_zero(self) -> Member:
        """Master or Chief when present, else Worker 0 (the spec's rules guarantee one of them)."""
        return self.members[0]

    @property
    def rendezvous_host(self) -> str:
        """The DNS name of the pod that holds rank 0: where the gang meets (MASTER_ADDR)."""
        if self.rendezvous_pod is None:
            return self.rank_zero.host
        return pod_dns_name(self.rendezvous_pod, self.job)

    def of_role(self, role: Role) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.role == role)
