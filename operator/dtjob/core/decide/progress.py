"""Rules of a running gang's progress: a gang that stopped stepping (progressDeadlineSeconds), a rank that
stays slow (slowRankRestartSeconds)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from dtjob.api import ConditionType, parse_timestamp
from dtjob.core.decide.decision import MAX_AVOIDED_NODES, Action, Decision, Due, Facts, Reason
from dtjob.core.progress import judge, stall_message


def hang(facts: Facts) -> Decision | Due | None:
    """Every member runs and the step did not advance for runPolicy.progressDeadlineSeconds: restart, or
    fail past maxHangRestarts."""
    policy, status = facts.policy, facts.status
    if (deadline := policy.progress_deadline_seconds) is None or not facts.all_running:
        return None
    clock = judge(facts.ledger, status.progress, facts.gang.attempt, deadline, facts.now)
    if clock.stall is not None:
        cause = stall_message(clock.stall, deadline, facts.now)
        if status.restarts.hangs >= policy.max_hang_restarts:
            message = f"maxHangRestarts ({policy.max_hang_restarts}) reached; last: {cause}"
            return Decision(Action.FAIL, Reason.PROGRESS_DEADLINE_EXCEEDED, message)
        return Decision(Action.RESTART_GANG, Reason.PROGRESS_DEADLINE_EXCEEDED, cause, step=facts.step)
    return Due(clock.left) if clock.left is not None else None


def slow_rank(facts: Facts) -> Decision | Due | None:
    """A restart without the slowest rank's node once SlowRank has been True for
    runPolicy.slowRankRestartSeconds (and the reports still say so); else when that is due, or None when
    there is nothing to wait for."""
    status, now, slow = facts.status, facts.now, facts.slow
    if (after_seconds := facts.policy.slow_rank_restart_seconds) is None or not facts.all_running:
        return None
    condition = status.condition(ConditionType.SLOW_RANK)
    if not slow:
        return None
    if condition is None or condition.status != "True":
        return Due(float(after_seconds))  # it turns True in this pass: its clock starts now
    since = parse_timestamp(condition.last_transition_time)
    if (left := (since + timedelta(seconds=after_seconds) - now).total_seconds()) > 0:
        return Due(left)
    by_name = {p.name: p for p in facts.current.values()}
    nodes = {rank.pod: by_name[rank.pod].node for rank in slow if rank.pod in by_name}
    candidates = [r for r in slow if nodes.get(r.pod) and nodes[r.pod] not in status.avoided_nodes]
    if not candidates or len(status.avoided_nodes) >= MAX_AVOIDED_NODES:
        return None
    rank = max(candidates, key=lambda r: r.seconds - r.others)
    node = nodes[rank.pod]
    message = (
        f"pod {rank.pod} on node {node} stayed slow for {after_seconds}s ({rank.seconds:.2f}s of its own "
        f"work a step against {rank.others:.2f}s for the rest of the gang): restarting the gang without "
        f"node {node} (runPolicy.slowRankRestartSeconds)"
    )
    return replace(Decision(Action.RESTART_GANG, Reason.SLOW_RANK, message, avoid=node), step=facts.step)
