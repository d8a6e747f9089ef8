"""What a gang that nothing ended does next: wait for an earlier attempt's pods to go, create its missing
members (a hot spare taking a rank where one runs, the pods an in-place restart keeps moved to the
attempt), or train on."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Final

from dtjob.api import JobStatus, RestartStrategy
from dtjob.core.decide.decision import OUTSIDE_THE_GANG, RUNNING, Action, Decision, Facts, Reason, soonest
from dtjob.core.decide.failure import backoff_remaining
from dtjob.core.frameworks import Member
from dtjob.core.observed import Observed, PodState, PodView


class Gaps:
    """The members the attempt lacks, and who fills them: kept pods, spares, or new pods (each derived once,
    when first asked for)."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts

    @cached_property
    def kept(self) -> tuple[PodView, ...]:
        return kept_in_place(self.facts.status, self.facts.observed)

    @cached_property
    def absent(self) -> list[Member]:
        # An Evaluator that went (or failed and was deleted) is simply created again: nothing depends on it.
        kept_members = {p.member for p in self.kept}
        current = self.facts.current
        return [m for m in self.facts.gang.members if m.pod not in current and m.pod not in kept_members]

    @cached_property
    def takeovers(self) -> tuple[tuple[str, str], ...]:
        spares = self.facts.observed.spares
        return _takeovers(self.absent, spares) if self.absent and spares else ()

    @cached_property
    def missing(self) -> list[str]:
        taken = {member for _, member in self.takeovers}
        return [m.pod for m in self.absent if m.pod not in taken]


def earlier_attempt(gaps: Gaps, due: float | None) -> Decision | None:
    """Pods of an earlier attempt still present: wait for them to go (a restart's deletes are under way)."""
    facts = gaps.facts
    kept = {p.name for p in gaps.kept}
    # Under InPlace a pod of an earlier attempt that is not kept can join no later rendezvous (the ranks
    # meet under their attempt's prefix, and only kept pods and spares are moved to it): only its name
    # is in the way, of a member's pod to create.
    lingering = facts.policy.restart_strategy == RestartStrategy.IN_PLACE
    stale = [
        p
        for p in facts.observed.not_of_attempt(facts.gang.attempt)
        if p.name not in kept and not (lingering and p.name not in gaps.missing)
    ]
    if not stale:
        return None
    message = f"waiting for pods of an earlier attempt to go: {', '.join(p.name for p in stale)}"
    return Decision(Action.WAIT, Reason.WAITING_FOR_PREVIOUS_ATTEMPT, message, due)


def missing_members(gaps: Gaps, due: float | None) -> Decision | None:
    """Create the attempt's missing members (after a failure's backoff): spares take ranks where they run,
    kept pods train on in place."""
    facts = gaps.facts
    missing, takeovers = gaps.missing, gaps.takeovers
    kept = sorted(p.name for p in gaps.kept)
    if not (missing or kept or takeovers):
        return None
    if (wait := backoff_remaining(facts.status, facts.now)) > 0:
        message = f"restarting after a failure; next attempt in {wait:.0f}s"
        return Decision(
            Action.WAIT, Reason.BACKING_OFF, message, soonest([wait] if due is None else [due, wait])
        )
    message = "; ".join(
        part
        for part in (
            f"creating {', '.join(missing)}" if missing else "",
            *(f"spare {spare} takes the rank of {member}" for spare, member in takeovers),
            f"{', '.join(kept)} train on in place" if kept else "",
        )
        if part
    )
    return Decision(
        Action.CREATE_MISSING, Reason.CREATING, message, due, kept=tuple(kept), takeovers=takeovers
    )


Step = Callable[[Gaps, float | None], Decision | None]
"""What a gang that nothing ended does next, given the soonest time a check is due again (None: it does
not apply)."""
STEPS: Final[tuple[Step, ...]] = (earlier_attempt, missing_members)


def kept_in_place(status: JobStatus, observed: Observed) -> tuple[PodView, ...]:
    """The pods of the attempt before an in-place restart (status.lastRestart.inPlace) that the current
    attempt keeps: still running, not being deleted or taken away. The others go, as in any restart; these
    are relabelled with the current attempt once the others are gone, and their trainers train on."""
    last = status.last_restart
    if last is None or not last.in_place:
        return ()
    return tuple(
        p
        for p in observed.not_of_attempt(status.attempt)
        if p.attempt == status.attempt - 1
        and p.state in RUNNING
        and not p.terminating
        and not p.disruption
        and p.role not in OUTSIDE_THE_GANG
    )


def _takeovers(absent: list[Member], spares: tuple[PodView, ...]) -> tuple[tuple[str, str], ...]:
    """The hot spares that take the ranks of the absent members, each the first running one of the
    member's role (ready first, then by name): only a spare whose trainer runs can take a rank at once;
    a member with no such spare gets a new pod."""
    free = sorted(
        (
            p
            for p in spares
            if p.state in RUNNING and not p.terminating and not p.disruption and not p.node_silent
        ),
        key=lambda p: (p.state != PodState.READY, p.name),
    )
    pairs: list[tuple[str, str]] = []
    for member in absent:
        spare = next((p for p in free if p.role == member.role), None)
        if spare is not None:
            free.remove(spare)
            pairs.append((spare.name, member.pod))
    return tuple(pairs)
