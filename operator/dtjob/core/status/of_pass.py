"""The status one pass leads to, whole, and the Events of the change: what next_status says of the gang,
then the goodput the pass adds, then the network chosen for the attempt (status.nccl)."""

from __future__ import annotations

from dtjob.api import JobStatus, NcclChoice
from dtjob.core import progress
from dtjob.core.decide import Decision, Facts
from dtjob.core.gke import NetworkChoice
from dtjob.core.status import Event, next_status, transition_events
from dtjob.core.status.goodput import next_goodput


def status_of_pass(
    facts: Facts, decision: Decision, chosen: NetworkChoice | None
) -> tuple[JobStatus, list[Event]]:
    """`chosen`: the network chosen in this pass, if any."""
    old, gang, observed, ledger = facts.status, facts.gang, facts.observed, facts.ledger
    # Rank 0's reports lead the progress shown; a spare that took rank 0 reports under its own name.
    rank_zero = gang.rank_zero.pod
    if ledger is not None:
        rank_zero = next(
            (p.name for p in observed.pods if p.member == rank_zero and p.attempt == gang.attempt), rank_zero
        )
    shown = progress.carried(old.progress, ledger, rank_zero, gang.attempt)
    new = next_status(facts, decision, shown)
    new = new.model_copy(update={"goodput": next_goodput(old, new, observed, facts.now)})
    events = transition_events(old, new)
    if chosen is not None:
        record, event = _network_record(old.attempt, chosen)
        new = new.model_copy(update={"nccl": record})
        events.append(event)
    return new, events


def _network_record(attempt: int, chosen: NetworkChoice) -> tuple[NcclChoice, Event]:
    """status.nccl for the attempt, and the Event that says what was chosen."""
    record = NcclChoice(
        attempt=attempt,
        profile=chosen.profile,
        reason=chosen.reason,
        autopilot=chosen.autopilot or None,
        daemon_image=chosen.daemon_image,
    )
    message = f"attempt {attempt}: NCCL profile {chosen.profile}: {chosen.reason}"
    return record, Event("Warning" if chosen.degraded else "Normal", "NetworkChosen", message)
