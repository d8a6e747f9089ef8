"""What the status says of the gang's members: per-role counts, whether all run, who waits for a node,
the slow ranks, the NCCL preflight's figures, the elastic mode's replacements."""

from __future__ import annotations

from typing import Final

from dtjob.api import (
    ConditionType,
    DistributedTrainingJobSpec,
    ElasticStatus,
    JobStatus,
    PreflightResult,
    Replacement,
    ReplicaStatus,
    Role,
)
from dtjob.core.frameworks import Gang
from dtjob.core.observed import ACTIVE_STATES, ENDED_ABNORMALLY, Observed, PodState, PodView
from dtjob.core.progress import SlowRank
from dtjob.core.render import PLACEMENT_GROUP_NODE_LABEL
from dtjob.core.status.conditions import Conditions


def elastic_of(
    old: JobStatus, gang: Gang, attempt: int, replaced: tuple[Replacement, ...]
) -> ElasticStatus | None:
    """The elastic mode's status: the bounds torchrun got, and the latest replacement of each member in
    this attempt (a new attempt's gang starts whole)."""
    elastic = gang.spec.torch.elastic
    if elastic is None:
        return None
    kept = old.elastic.replaced if old.elastic is not None and attempt == old.attempt else []
    fresh = {r.pod for r in replaced}
    return ElasticStatus(
        min_replicas=elastic.min_replicas,
        max_replicas=elastic.max_replicas or len(gang.members),
        replaced=[*(r for r in kept if r.pod not in fresh), *replaced],
    )


def preflight_of(
    old: PreflightResult | None, current: tuple[PodView, ...], attempt: int
) -> PreflightResult | None:
    """The NCCL preflight's figures for this attempt once a pod has them (every rank reports the same:
    the gang's slowest); until then the last attempt's stay."""
    if old is not None and old.attempt == attempt:
        return old
    measured = next((pod.preflight for pod in current if pod.preflight is not None), None)
    return PreflightResult.model_validate({**measured, "attempt": attempt}) if measured else old


def set_slow_rank(
    conditions: Conditions, slow: tuple[SlowRank, ...] | None, current: tuple[PodView, ...], attempt: int
) -> None:
    """SlowRank True naming each slow pod, its node and the figures; back to False (only once it was
    True: a job with no slow rank carries no such condition) when none is, or none can be judged."""
    if not slow:
        message = (
            "no rank's own step time is well above the rest of the gang's"
            if slow is not None
            else f"attempt {attempt}: not judged yet (fewer than two ranks report their own step time)"
        )
        conditions.set(ConditionType.SLOW_RANK, "False", "NoSlowRank", message)
        return
    nodes = {p.name: p.node or "unknown" for p in current}
    said = [_slow_said(rank, nodes.get(rank.pod, "unknown")) for rank in slow]
    message = "; ".join(said) + ": the whole gang waits for it in every all-reduce"
    conditions.set(ConditionType.SLOW_RANK, "True", "SlowRank", message)


def _slow_said(rank: SlowRank, node: str) -> str:
    times = f" ({rank.seconds / rank.others:.2g}x)" if rank.others > 0 else ""
    return (
        f"pod {rank.pod} on node {node} takes {rank.seconds:.2g}s of its own work a step against "
        f"{rank.others:.2g}s for the rest of the gang{times}"
    )


# How kube-scheduler's NodeAffinity plugin says that no node has the labels a pod selects.
NODE_SELECTOR_MISMATCH: Final = "didn't match Pod's node affinity/selector"


def set_schedulability(
    conditions: Conditions, current: tuple[PodView, ...], spec: DistributedTrainingJobSpec
) -> None:
    """Unschedulable while a live pod waits for a place, with the scheduler's own message (and where the
    pods' compact placement group may be why, what GKE offers); left as it was when the job finishes, so
    a SchedulingTimeout failure keeps the scheduler's word beside it."""
    waiting = [p for p in current if p.unschedulable and not p.terminating]
    if not waiting:
        conditions.set(ConditionType.UNSCHEDULABLE, "False", "Scheduled", "no pod is waiting for a node")
        return
    timeout_seconds = spec.run_policy.scheduling_timeout_seconds
    then = f"; the job fails after schedulingTimeoutSeconds ({timeout_seconds}s)" if timeout_seconds else ""
    names = ", ".join(p.name for p in waiting)
    message = f"{len(waiting)} pod(s) cannot be scheduled ({names}){then}: {waiting[0].message}"
    group = spec.accelerator.placement_group if spec.accelerator else None
    if group and NODE_SELECTOR_MISMATCH in waiting[0].message:
        message += (
            f". The pods select {PLACEMENT_GROUP_NODE_LABEL}={group} (accelerator.placementGroup): on "
            "Autopilot GKE offers compact placement only for some GPUs (its page has named A100, L4 and "
            "H100); on Standard only the nodes of a node pool created with --placement-type=COMPACT carry "
            "that label, so select such a pool in the template instead (docs/gke.md#compact-placement)"
        )
    conditions.set(ConditionType.UNSCHEDULABLE, "True", "PodUnschedulable", message)


def all_running(gang: Gang, observed: Observed, attempt: int) -> bool:
    """Every pod of the attempt exists and is running (or has already finished well), at least one running."""
    pods = {p.member: p for p in observed.of_attempt(attempt) if not p.terminating}
    states = [pods[m.pod].state if m.pod in pods else None for m in gang.members]
    running = (PodState.RUNNING, PodState.READY)
    return all(s in (*running, PodState.SUCCEEDED) for s in states) and any(s in running for s in states)


def replica_status(role: Role, pods: list[PodView], spares: list[PodView]) -> ReplicaStatus:
    running = (PodState.RUNNING, PodState.READY)
    return ReplicaStatus(
        role=role,
        active=sum(1 for p in pods if p.state in ACTIVE_STATES and not p.terminating),
        ready=sum(1 for p in pods if p.state == PodState.READY and not p.terminating),
        succeeded=sum(1 for p in pods if p.state == PodState.SUCCEEDED),
        failed=sum(1 for p in pods if p.state in ENDED_ABNORMALLY),
        spares=sum(1 for p in spares if p.state in ACTIVE_STATES and not p.terminating),
        spares_running=sum(1 for p in spares if p.state in running and not p.terminating),
    )
