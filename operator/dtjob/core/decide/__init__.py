"""The one decision of a reconcile pass: what the gang needs next. Pure: plain data in, a Decision out.

`decide` runs the RULES in a fixed order, each able to end the pass (a Decision) or to say when its check
is due again (Due): finished (TTL) -> suspended -> Workload finished -> not admitted by Kueue -> deadline
-> success -> a member that ended abnormally or went missing (replace it in an elastic gang, restart the
gang, or fail) -> a gang that stopped stepping (progressDeadlineSeconds) -> a slow rank -> scheduling
timeout. A gang that none of them ends takes the first of the STEPS that applies: stale pods of an earlier
attempt still present -> missing pods (after the failure backoff); else it is in progress. What an abnormal end
means is `fault_of`'s table: preemption, retryable failure, or permanent.

An abnormal end is judged for the whole gang, not pod by pod: on a node shutdown the peers on other
nodes often crash (the collective broke) before the preempted pod says anything. A break that nothing
explains yet is watched for runPolicy.failureSettleSeconds while members still run; any member seen
disrupted meanwhile makes the restart a preemption. An Evaluator is not part of the training cluster:
its failure restarts nothing (its pod stays for its logs).

One module a concern: lifecycle (TTL, suspension, deadline, success, scheduling timeout), admission
(Kueue), failure (and faults, elastic), progress (hang, slow rank), members (earlier attempts, missing
members, spares, in place). A new rule is a function `(Facts) -> Decision | Due | None` in its concern's
module, placed in RULES where it takes precedence.
"""

from __future__ import annotations

from typing import Final

from dtjob.core.decide import admission, failure, lifecycle, progress
from dtjob.core.decide.decision import (
    MAX_AVOIDED_NODES,
    RESTART_CHARGES,
    Action,
    Charge,
    Decision,
    Due,
    Facts,
    Fault,
    Reason,
    Rule,
    restart_charge,
    soonest,
)
from dtjob.core.decide.failure import backoff_seconds
from dtjob.core.decide.faults import MESSAGE_TAIL_CHARS, fault_of, tail
from dtjob.core.decide.members import STEPS, Gaps, kept_in_place

RULES: Final[tuple[Rule, ...]] = (
    lifecycle.finished,
    lifecycle.suspended,
    admission.workload_finished,
    admission.not_admitted,
    lifecycle.deadline,
    lifecycle.succeeded,
    failure.abnormal_end,
    progress.hang,
    progress.slow_rank,
    lifecycle.scheduling_timeout,
)


def decide(facts: Facts) -> Decision:
    """The pass's decision: the first rule that decides, else the first step that closes a gap, else wait
    for the soonest of the rules' timers."""
    timers: list[float] = []
    for rule in RULES:
        outcome = rule(facts)
        if isinstance(outcome, Decision):
            return outcome
        if outcome is not None:
            timers.append(outcome.seconds)
    gaps, due = Gaps(facts), soonest(timers)
    for step in STEPS:
        if (decision := step(gaps, due)) is not None:
            return decision
    return Decision(Action.WAIT, Reason.IN_PROGRESS, requeue_after=due)


__all__ = [
    "MAX_AVOIDED_NODES",
    "MESSAGE_TAIL_CHARS",
    "RESTART_CHARGES",
    "RULES",
    "Action",
    "Charge",
    "Decision",
    "Due",
    "Facts",
    "Fault",
    "Reason",
    "backoff_seconds",
    "decide",
    "fault_of",
    "kept_in_place",
    "restart_charge",
    "tail",
]
