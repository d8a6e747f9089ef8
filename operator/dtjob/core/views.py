"""What a pass sees of one pod and of one node: the views `classify` fills in and `observe` groups. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from dtjob.api import Role


class PodState(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    READY = "Ready"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    LOST = "Lost"
    """Deleted (or gone) before it ended, with nothing on the pod saying why."""
    UNKNOWN = "Unknown"


ACTIVE_STATES: Final = frozenset({PodState.PENDING, PodState.RUNNING, PodState.READY, PodState.UNKNOWN})
ENDED_ABNORMALLY: Final = frozenset({PodState.FAILED, PodState.PREEMPTED, PodState.LOST})


@dataclass(frozen=True)
class PodView:
    name: str
    uid: str
    role: Role | None
    index: int | None
    attempt: int | None
    state: PodState
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    node: str | None = None
    created: datetime | None = None
    ended_at: datetime | None = None
    """When the trainer container terminated (its finishedAt): the first member to end is the root cause."""
    terminating: bool = False
    unschedulable: bool = False
    """The scheduler reported it cannot place the pod (PodScheduled=False, Unschedulable)."""
    stuck: bool = False
    """Terminating past its grace period on a lost node: no kubelet will ever finish it (force-delete)."""
    recheck_at: datetime | None = None
    """When time alone may change this view (a grace running out); None when nothing is pending."""
    preflight: Mapping[str, Any] | None = field(default=None, compare=False)
    """The figures of its NCCL preflight (dtjob.core.preflight), once that init container ended with them."""
    disruption: str = ""
    """Why Kubernetes seems to be taking a pod away that has not ended as disrupted (yet): a
    DisruptionTarget condition, or its node NotReady, gone or tainted to go. Empty when nothing says so."""
    node_silent: bool = False
    """Not ended, on a node that is not Ready or is gone: its processes may still hold their sockets open
    (no kubelet stopped them), so a peer may wait on them until a collective times out."""
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    annotations: Mapping[str, str] = field(default_factory=dict, compare=False)
    member: str = ""
    """The member it is, named as the member's own pod is (names.pod_name): its name, but for a hot spare
    that took a member's rank (it keeps its own name), whose role and index labels say which."""
    spare: bool = False
    """A hot spare waiting outside the gang (spec.replicas[].spares): no index, rank or attempt yet."""
    exited: bool = False
    """Its trainer container terminated (or the pod reached a terminal phase): its process is gone."""

    def __post_init__(self) -> None:
        if not self.member:
            object.__setattr__(self, "member", self.name)

    @property
    def deleted_by_hand(self) -> bool:
        """Deleted (or gone) with no disruption condition: by a person or a controller, not by Kubernetes,
        whatever it exited with on the SIGTERM that followed."""
        return self.state == PodState.LOST or (self.terminating and self.state != PodState.PREEMPTED)


@dataclass(frozen=True)
class NodeView:
    name: str
    not_ready_since: datetime | None
    """When the Ready condition last left True; None while the node is Ready."""
    not_ready_reason: str = ""
    going_away: str = ""
    """A taint of DISRUPTION_TAINTS the node carries, if any."""
    shutting_down: bool = False
    """Its kubelet says so (Ready False: "node is shutting down"): its graceful node shutdown, as GKE
    starts it in a Spot VM's 30 s reclaim notice, stops the node's pods on SIGTERM. Not silent."""
