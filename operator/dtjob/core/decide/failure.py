"""The rule of a member that ended abnormally or vanished: an elastic gang replaces it; any other gang
restarts whole (at once after a preemption, after a backoff after a failure, in place where it may) or
fails."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Final

from dtjob.api import FailureSignature, JobStatus, RestartStrategy, parse_timestamp
from dtjob.core.decide.decision import MAX_AVOIDED_NODES, Action, Decision, Facts, Fault, Reason
from dtjob.core.decide.elastic import replace_members
from dtjob.core.decide.faults import (
    ENDED_BEFORE_ITS_ATTEMPT,
    by_end,
    describe_end,
    ended_before_its_attempt,
    fault_of,
    vanished,
)
from dtjob.core.failures import describe, repeated, signatures
from dtjob.core.observed import (
    ACTIVE_STATES,
    DAEMON_NOT_READY,
    ENDED_ABNORMALLY,
    IMAGE_ERRORS,
    PodState,
    PodView,
)
from dtjob.core.preflight import FAILED as PREFLIGHT_FAILED

# Failure restarts back off: 5 s, 10 s, 20 s ... capped at 5 minutes. Preemption restarts go at once:
# the new pods simply wait Pending for capacity.
BACKOFF_BASE_SECONDS: Final = 5.0
BACKOFF_CAP_SECONDS: Final = 300.0

FaultOf = tuple[PodView, Fault, str]


def abnormal_end(facts: Facts) -> Decision | None:
    current = facts.current
    ended = [
        current[m.pod]
        for m in facts.training
        if m.pod in current and current[m.pod].state in ENDED_ABNORMALLY
    ]
    lost = vanished(facts)
    if not (ended := ended + lost + ended_before_its_attempt(facts)):
        return None
    decision = replace_members(facts, ended) or _restart_or_fail(facts, by_end(ended))
    return replace(decision, vanished=tuple(pod.name for pod in lost))


def _restart_or_fail(facts: Facts, ended: list[PodView]) -> Decision:
    """A gang cannot lose a member: restart it whole, or fail. A preemption explains its peers' failures
    (they lose a rank and crash), so any preemption makes the restart a preemption, and so does a member
    seen being disrupted before the settle window is over; among failures, a permanent one is the root
    cause (its peers were killed or timed out after it), else the first to end. `ended`: the first to
    end first."""
    faults = [(pod, *fault_of(pod, facts.policy.restart_policy)) for pod in ended]
    if (preempted := _preemption(facts, ended, faults)) is not None:
        return preempted
    if preflight := next((pod for pod in ended if pod.reason == PREFLIGHT_FAILED), None):
        # The network, not the code: failing fast beats restarting onto the same fabric (and is not
        # charged to backoffLimit).
        return Decision(Action.FAIL, Reason.PREFLIGHT_FAILED, describe_end(preflight))
    return _failure(facts, ended, faults)


def _preemption(facts: Facts, ended: list[PodView], faults: list[FaultOf]) -> Decision | None:
    """The restart (or the end, past maxPreemptions) when a member was preempted or is being taken away."""
    status = facts.status
    # A member deleted without a word stops its peers as a preemption would (on SIGTERM they save and
    # exit 200): then only Kubernetes' own word makes it a preemption, not the trainers'.
    deleted = any(pod.deleted_by_hand for pod in ended)
    preempted = [
        (pod, note)
        for pod, fault, note in faults
        if fault == Fault.PREEMPTION and (pod.state == PodState.PREEMPTED or not deleted)
    ]
    disrupted = [pod for pod in facts.current.values() if pod.disruption and pod.state in ACTIVE_STATES]
    if not preempted and not disrupted:
        return None
    if preempted:
        cause = describe_end(preempted[0][0]) + (f" ({preempted[0][1]})" if preempted[0][1] else "")
    else:
        cause = f"pod {disrupted[0].name} is being taken away ({disrupted[0].disruption}); " + (
            f"its peers ended after it: {describe_end(ended[0])}"
        )
    if (spent := preemptions_spent(facts, cause)) is not None:
        return spent
    avoid = _bad_node(status, ended)
    then = f"; the next attempts keep off node {avoid}" if avoid else ""
    in_place = _in_place(facts, ended) and avoid is None
    return Decision(
        Action.RESTART_GANG, Reason.PREEMPTED, cause + then, step=facts.step, avoid=avoid, in_place=in_place
    )


def preemptions_spent(facts: Facts, cause: str) -> Decision | None:
    """The end of the job when one more preemption (this one: `cause`) is past runPolicy.maxPreemptions."""
    policy = facts.policy
    if facts.status.restarts.preemptions < policy.max_preemptions:
        return None
    message = f"maxPreemptions ({policy.max_preemptions}) reached; last: {cause}"
    return Decision(Action.FAIL, Reason.MAX_PREEMPTIONS_EXCEEDED, message)


def _failure(facts: Facts, ended: list[PodView], faults: list[FaultOf]) -> Decision:
    """A failure's restart after the backoff; or the end: permanent, past backoffLimit, or repeated; or a
    wait in the settle window, for a disruption that would make it a preemption."""
    status, policy, step = facts.status, facts.policy, facts.step
    root = next((f for f in faults if f[0].deleted_by_hand), faults[0])
    failed, fault, note = next((f for f in faults if f[1] == Fault.PERMANENT), root)
    cause = describe_end(failed) + (f" ({note})" if note else "")
    if (settling := _settling(facts, ended)) is not None:
        message = (
            f"{cause}; watching the gang for a disruption for up to {policy.failure_settle_seconds}s "
            "before charging a failure"
        )
        return Decision(Action.WAIT, Reason.SETTLING, message, settling)
    if fault == Fault.PERMANENT:
        return Decision(Action.FAIL, Reason.POD_FAILED, cause)
    if status.restarts.failures >= policy.backoff_limit:
        message = f"backoffLimit ({policy.backoff_limit}) reached; last: {cause}"
        return Decision(Action.FAIL, Reason.BACKOFF_LIMIT_EXCEEDED, message)
    failures = signatures(pod for pod in ended if not pod.deleted_by_hand)
    if policy.stop_on_repeated_failure and (same := repeated(status.last_restart, failures, step)):
        return Decision(Action.FAIL, Reason.REPEATED_FAILURE, _repeated_message(status, same, step, cause))
    return Decision(
        Action.RESTART_GANG,
        Reason.POD_FAILED,
        cause,
        backoff_seconds(status.restarts.failures + 1),
        step=step,
        failures=failures,
        in_place=_in_place(facts, ended),
    )


def _in_place(facts: Facts, ended: list[PodView]) -> bool:
    """runPolicy.restartStrategy InPlace, unless a member's processes may still hold a collective open:
    its node went silent or is gone (NodeLost, or not Ready yet), or it went before its end was seen
    (Vanished); or the others wait in a rendezvous for a member that never came (EndedBeforeItsAttempt).
    Their peers may be stuck in that collective: the whole gang is recreated."""
    stuck = ("Vanished", ENDED_BEFORE_ITS_ATTEMPT)
    return facts.policy.restart_strategy == RestartStrategy.IN_PLACE and not any(
        pod.reason in stuck or pod.node_silent for pod in (*ended, *facts.current.values())
    )


def _bad_node(status: JobStatus, ended: list[PodView]) -> str | None:
    """The node of a member whose GPUDirect daemon never became ready there (its host components are
    broken): the gang restarts without it, as off a slow rank's node, at most MAX_AVOIDED_NODES in all."""
    if len(status.avoided_nodes) >= MAX_AVOIDED_NODES:
        return None
    return next((p.node for p in ended if p.reason == DAEMON_NOT_READY and p.node), None)


def _repeated_message(status: JobStatus, same: FailureSignature, step: int | None, cause: str) -> str:
    before = status.last_restart.step if status.last_restart is not None else None
    at = (
        ""
        if step is None
        else f" at step {step}" + (f" (the one before at {before})" if before != step else "")
    )
    return (
        f"attempts {status.attempt - 1} and {status.attempt} failed the same way{at}: {describe(same)}; "
        f"another attempt would too (runPolicy.stopOnRepeatedFailure); last: {cause}"
    )


def _settling(facts: Facts, ended: list[PodView]) -> float | None:
    """Seconds left to watch a broken gang before charging a failure; None when the charge is due now:
    the window is over, no member still runs (nothing more will be said), or the only ends are image
    errors (a pod that never ran breaks no collective)."""
    status, now = facts.status, facts.now
    if not any(pod.state in ACTIVE_STATES for pod in facts.current.values()):
        return None
    if all(pod.reason in IMAGE_ERRORS for pod in ended):
        return None
    since = parse_timestamp(status.broken_since) if status.broken_since else now
    left = (since + timedelta(seconds=facts.policy.failure_settle_seconds) - now).total_seconds()
    return left if left > 0 else None


def backoff_seconds(failures: int) -> float:
    """Delay before the attempt that follows the `failures`-th failure restart."""
    delay: float = BACKOFF_BASE_SECONDS * 2.0 ** max(failures - 1, 0)
    return min(delay, BACKOFF_CAP_SECONDS)


def backoff_remaining(status: JobStatus, now: datetime) -> float:
    last = status.last_restart
    if last is None or last.reason != Reason.POD_FAILED:
        return 0.0
    due = parse_timestamp(last.time) + timedelta(seconds=backoff_seconds(status.restarts.failures))
    remaining: float = (due - now).total_seconds()
    return max(0.0, remaining)
