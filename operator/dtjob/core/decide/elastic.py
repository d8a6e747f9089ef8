"""An elastic gang (spec.torch.elastic) trains on through lost members: they are replaced, each on its own."""

from __future__ import annotations

from dtjob.api import Replacement, timestamp
from dtjob.core.decide.decision import RUNNING, Action, Decision, Facts, Fault, Reason
from dtjob.core.decide.faults import describe_end, fault_of
from dtjob.core.observed import PodState, PodView


def replace_members(facts: Facts, ended: list[PodView]) -> Decision | None:
    """An elastic gang's lost members (preempted, or deleted or gone) replaced while the rest trains on;
    None when the gang must restart (or fail) as any other: not elastic, the rendezvous host lost (every
    torchrun hangs on its store), a member that failed (its torchrun's own restarts ran out: the code, not
    the capacity), or fewer than minReplicas members left running. Replacements seen in an earlier pass
    (status.elastic.replaced) are not counted again: their pods are still going, or are to be created."""
    elastic = facts.spec.torch.elastic
    if elastic is None:
        return None
    restart_policy = facts.policy.restart_policy
    if any(
        pod.name == facts.gang.rank_zero.pod
        or (pod.state != PodState.LOST and fault_of(pod, restart_policy)[0] != Fault.PREEMPTION)
        for pod in ended
    ):
        return None
    lost = {pod.name for pod in ended}
    left = [
        pod
        for name, pod in facts.current.items()
        if name not in lost and pod.state in RUNNING and not pod.terminating
    ]
    if len(left) < elastic.min_replicas:
        return None
    status = facts.status
    recorded = status.elastic.replaced if status.elastic is not None else []
    # A member gone before its end was seen (no uid) is known by name: its record's pod went.
    known = {(r.pod, r.uid) for r in recorded} | {(r.pod, "") for r in recorded}
    # What the MemberReplaced Event says, once: the replacement's record keeps it.
    train_on = f"the other {len(left)} members train on (spec.torch.elastic: at least {elastic.min_replicas})"
    new = tuple(
        Replacement(pod=pod.name, uid=pod.uid, reason=pod.state, message=f"{describe_end(pod)}; {train_on}",
                    time=timestamp(facts.now))
        for pod in ended
        if (pod.name, pod.uid) not in known
    )  # fmt: skip
    return Decision(Action.REPLACE_MEMBERS, Reason.MEMBER_REPLACED, replaced=new)
