"""Names and labels of a job's children, from one place (the operator, the tests and users rely on them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from dtjob.api import API_VERSION, GROUP, KIND

JOB_NAME_LABEL: Final = f"{GROUP}/job-name"
JOB_UID_LABEL: Final = f"{GROUP}/job-uid"
ROLE_LABEL: Final = f"{GROUP}/role"
REPLICA_INDEX_LABEL: Final = f"{GROUP}/replica-index"
RANK_LABEL: Final = f"{GROUP}/rank"
ATTEMPT_LABEL: Final = f"{GROUP}/attempt"
# A hot spare (spec.replicas[].spares) carries this label and no index, rank or attempt until it takes a rank.
SPARE_LABEL: Final = f"{GROUP}/spare"
# Under restartStrategy InPlace, the DNS name of the pod that holds rank 0 (the rendezvous host): a spare
# that took rank 0 moves it, and the trainers read it from a downward API file.
RENDEZVOUS_HOST_ANNOTATION: Final = f"{GROUP}/rendezvous-host"
# Under restartStrategy InPlace, a member's attempt label once more, written by a patch of its own once the
# relabel to a new attempt has landed. The kubelet rewrites the attempt files (a downward API volume) when
# it syncs the pod after a change, but now and then leaves them to its periodic sync, 60-90 s on, while
# the whole gang waits (kubernetes/kubernetes#29633): the second change has it sync the pod again.
ATTEMPT_RESYNC_ANNOTATION: Final = f"{GROUP}/attempt-resync"
SPARE_NAME: Final = re.compile(r"-spare[0-9]+$")
# The container that receives the wiring; without one of this name, the template's first container does.
TRAINER_CONTAINER: Final = "trainer"


@dataclass(frozen=True)
class JobRef:
    """The identity of one job object: what its children are named after and owned by."""

    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, job: Mapping[str, Any]) -> JobRef:
        meta = job["metadata"]
        return cls(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])

    def owner_reference(self) -> dict[str, Any]:
        """Controller reference: deleting the job cascades to its children, and only we manage them."""
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def service_name(job_name: str) -> str:
    """The headless Service is named after the job (so pods resolve as `<pod>.<job>`)."""
    return job_name


def network_policy_name(job_name: str) -> str:
    """The NetworkPolicy (spec.networkPolicy) is named after the job, as the Service is."""
    return job_name


def gpu_nic_claims_name(job_name: str) -> str:
    """The ResourceClaimTemplate from which each GPU pod claims its node's GPU NICs (ManagedRDMA)."""
    return f"{job_name}-gpu-nics"


def pod_name(job_name: str, role: str, index: int) -> str:
    return f"{job_name}-{role.lower()}-{index}"


def spare_pod_name(job_name: str, role: str, number: int) -> str:
    """A spare keeps its name when it takes a rank: the next spare takes the lowest number free."""
    return f"{job_name}-{role.lower()}-spare{number}"


def named_as_spare(pod: str) -> bool:
    """Whether the pod was made a hot spare (it keeps that name as a member)."""
    return SPARE_NAME.search(pod) is not None


def pod_dns_name(pod: str, job: JobRef) -> str:
    """The pod's DNS name under the headless Service. It ends in `.svc`, not the cluster domain (which
    varies): the pod's resolv.conf search list (`cluster.local`, ...) completes it."""
    return f"{pod}.{service_name(job.name)}.{job.namespace}.svc"


def selector_labels(job_name: str) -> dict[str, str]:
    """What the Service selects and what the operator lists children by."""
    return {JOB_NAME_LABEL: job_name}


def job_labels(job: JobRef) -> dict[str, str]:
    return {JOB_NAME_LABEL: job.name, JOB_UID_LABEL: job.uid}


def spare_labels(job: JobRef, role: str) -> dict[str, str]:
    return {**job_labels(job), ROLE_LABEL: str(role), SPARE_LABEL: "true"}


def pod_labels(job: JobRef, role: str, index: int, rank: int, attempt: int) -> dict[str, str]:
    return {
        **job_labels(job),
        ROLE_LABEL: str(role),
        REPLICA_INDEX_LABEL: str(index),
        RANK_LABEL: str(rank),
        ATTEMPT_LABEL: str(attempt),
    }
