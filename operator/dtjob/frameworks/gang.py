"""The members of a job's gang in rank order: who is rank 0, and what each pod is called and reached at."""

from __future__ import annotations

from dataclasses import dataclass

from dtjob.api import DistributedTrainingJobSpec, Role
from dtjob.names import JobRef, pod_dns_name, pod_name


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

    @classmethod
    def of(cls, job: JobRef, spec: DistributedTrainingJobSpec, attempt: int) -> Gang:
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
        return cls(job=job, spec=spec, attempt=attempt, members=members)

    @property
    def rank_zero(self) -> Member:
        """Master or Chief when present, else Worker 0 (the spec's rules guarantee one of them)."""
        return self.members[0]

    def of_role(self, role: Role) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.role == role)
