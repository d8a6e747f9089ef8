"""What a job's children look like right now: each pod classified, grouped by attempt. Pure.

Classification is an ordered chain of small rules over one pod (first match wins), so finer failure
handling (image pull errors that persist, node-lost grace periods, exit-code tables) extends the chain
without touching its callers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from dtjob.api import Role, parse_timestamp
from dtjob.names import ATTEMPT_LABEL, REPLICA_INDEX_LABEL, ROLE_LABEL, TRAINER_CONTAINER


class PodState(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    READY = "Ready"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    UNKNOWN = "Unknown"


ACTIVE_STATES: Final = frozenset({PodState.PENDING, PodState.RUNNING, PodState.READY, PodState.UNKNOWN})
ENDED_ABNORMALLY: Final = frozenset({PodState.FAILED, PodState.PREEMPTED})

# DisruptionTarget reasons: Kubernetes took the pod away; the training code did nothing wrong.
DISRUPTION_REASONS: Final = frozenset(
    {
        "TerminationByKubelet",
        "PreemptionByScheduler",
        "DeletionByTaintManager",
        "EvictionByEvictionAPI",
        "DeletionByPodGC",
    }
)
# status.reason of pods the kubelet ended: graceful node shutdown (Terminated; Shutdown before 1.22),
# rejected while the node shuts down (NodeShutdown), node-pressure eviction (Evicted).
DISRUPTED_POD_REASONS: Final = frozenset({"Terminated", "Shutdown", "NodeShutdown", "Evicted"})


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
    terminating: bool = False
    unschedulable: bool = False
    """The scheduler reported it cannot place the pod (PodScheduled=False, Unschedulable)."""
    node_lost: bool = False


@dataclass(frozen=True)
class Observed:
    service: Mapping[str, Any] | None
    pods: tuple[PodView, ...]

    def of_attempt(self, attempt: int) -> tuple[PodView, ...]:
        return tuple(p for p in self.pods if p.attempt == attempt)

    def not_of_attempt(self, attempt: int) -> tuple[PodView, ...]:
        return tuple(p for p in self.pods if p.attempt != attempt)


def observe(children: Sequence[Mapping[str, Any]], nodes: Collection[str] | None = None) -> Observed:
    """Classify the job's pods; `nodes`, when known, are the names of the nodes that still exist."""
    service = next((c for c in children if c.get("kind") == "Service"), None)
    pods = tuple(
        sorted(
            (classify(c, nodes) for c in children if c.get("kind") == "Pod"),
            key=lambda p: (p.attempt or 0, p.name),
        )
    )
    return Observed(service=service, pods=pods)


@dataclass(frozen=True)
class _Facts:
    """The parts of a pod the rules read."""

    phase: str
    reason: str
    message: str
    conditions: Mapping[str, Mapping[str, Any]]
    trainer_state: Mapping[str, Any]
    node: str | None
    node_exists: bool


Classification = tuple[PodState, str, str]
_Rule = Callable[[_Facts], Classification | None]


def _disrupted(facts: _Facts) -> Classification | None:
    target = facts.conditions.get("DisruptionTarget", {})
    if (
        facts.phase == "Failed"
        and target.get("status") == "True"
        and target.get("reason") in DISRUPTION_REASONS
    ):
        return PodState.PREEMPTED, str(target["reason"]), str(target.get("message", ""))
    if facts.phase == "Failed" and facts.reason in DISRUPTED_POD_REASONS:
        return PodState.PREEMPTED, facts.reason, facts.message
    return None


def _node_lost(facts: _Facts) -> Classification | None:
    if facts.node and not facts.node_exists and facts.phase not in ("Succeeded", "Failed"):
        return PodState.PREEMPTED, "NodeLost", f"node {facts.node} no longer exists"
    return None


def _ended(facts: _Facts) -> Classification | None:
    terminated = facts.trainer_state.get("terminated") or {}
    if facts.phase == "Succeeded":
        return (
            PodState.SUCCEEDED,
            str(terminated.get("reason", "Completed")),
            str(terminated.get("message", "")),
        )
    if facts.phase == "Failed":
        reason = str(terminated.get("reason") or facts.reason or "Failed")
        return PodState.FAILED, reason, str(terminated.get("message") or facts.message)
    return None


def _live(facts: _Facts) -> Classification | None:
    if facts.phase == "Running":
        ready = facts.conditions.get("Ready", {}).get("status") == "True"
        return (PodState.READY if ready else PodState.RUNNING), "", ""
    if facts.phase == "Pending":
        waiting = facts.trainer_state.get("waiting") or {}
        scheduled = facts.conditions.get("PodScheduled", {})
        if waiting:
            return PodState.PENDING, str(waiting.get("reason", "")), str(waiting.get("message", ""))
        return PodState.PENDING, str(scheduled.get("reason", "")), str(scheduled.get("message", ""))
    return None


CLASSIFIERS: Final[tuple[_Rule, ...]] = (_disrupted, _node_lost, _ended, _live)


def classify(pod: Mapping[str, Any], nodes: Collection[str] | None = None) -> PodView:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    node = spec.get("nodeName")
    facts = _Facts(
        phase=str(status.get("phase", "Pending")),
        reason=str(status.get("reason", "")),
        message=str(status.get("message", "")),
        conditions={str(c.get("type")): c for c in status.get("conditions") or []},
        trainer_state=_trainer_status(spec, status).get("state") or {},
        node=node,
        node_exists=nodes is None or node in nodes,
    )
    state, reason, message = next(
        (found for rule in CLASSIFIERS if (found := rule(facts)) is not None),
        (PodState.UNKNOWN, facts.reason, facts.message),
    )
    scheduled = facts.conditions.get("PodScheduled", {})
    terminated = facts.trainer_state.get("terminated") or {}
    return PodView(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        role=_role(labels.get(ROLE_LABEL)),
        index=_int(labels.get(REPLICA_INDEX_LABEL)),
        attempt=_int(labels.get(ATTEMPT_LABEL)),
        state=state,
        reason=reason,
        message=message,
        exit_code=_int(terminated.get("exitCode")),
        node=node,
        created=parse_timestamp(meta["creationTimestamp"]) if meta.get("creationTimestamp") else None,
        terminating=bool(meta.get("deletionTimestamp")),
        unschedulable=scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable",
        node_lost=reason == "NodeLost",
    )


def _trainer_status(spec: Mapping[str, Any], status: Mapping[str, Any]) -> Mapping[str, Any]:
    """The status of the container that got the wiring: "trainer", else the first declared one."""
    statuses = {s.get("name"): s for s in status.get("containerStatuses") or []}
    containers = spec.get("containers") or []
    names = [c.get("name") for c in containers]
    name = TRAINER_CONTAINER if TRAINER_CONTAINER in names else (names[0] if names else None)
    found: Mapping[str, Any] = statuses.get(name) or {}
    return found


def _role(value: Any) -> Role | None:
    return Role(value) if value in set(Role) else None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
