"""Rules of a job's life: its TTL once finished, suspension, activeDeadlineSeconds, success, and the
scheduling timeout."""

from __future__ import annotations

from datetime import timedelta

from dtjob.api import Role, SuccessPolicy, parse_timestamp
from dtjob.core.decide.decision import Action, Decision, Due, Facts, Reason, soonest
from dtjob.core.observed import PodState


def finished(facts: Facts) -> Decision | None:
    """A finished job waits for its TTL (runPolicy.ttlSecondsAfterFinished), then goes."""
    status, policy, now = facts.status, facts.policy, facts.now
    if not status.finished:
        return None
    timers: list[float] = []
    if policy.ttl_seconds_after_finished is not None and status.completion_time:
        due = parse_timestamp(status.completion_time) + timedelta(seconds=policy.ttl_seconds_after_finished)
        if now >= due:
            return Decision(Action.TTL_EXPIRED, Reason.TTL_EXPIRED, "ttlSecondsAfterFinished has passed")
        timers.append((due - now).total_seconds())
    return Decision(Action.WAIT, Reason.FINISHED, requeue_after=soonest(timers))


def suspended(facts: Facts) -> Decision | None:
    if not facts.policy.suspend:
        return None
    return Decision(Action.SUSPEND, Reason.SUSPENDED, "the job is suspended: its pods are deleted")


def deadline(facts: Facts) -> Decision | Due | None:
    """runPolicy.activeDeadlineSeconds, counted from the job's start."""
    limit, started = facts.policy.active_deadline_seconds, facts.status.start_time
    if limit is None or not started:
        return None
    due = parse_timestamp(started) + timedelta(seconds=limit)
    if facts.now >= due:
        message = f"the job was active longer than activeDeadlineSeconds ({limit}s)"
        return Decision(Action.DEADLINE_EXCEEDED, Reason.DEADLINE_EXCEEDED, message)
    return Due((due - facts.now).total_seconds())


def succeeded(facts: Facts) -> Decision | None:
    """runPolicy.successPolicy: rank 0's pod succeeded, or every Worker's."""
    current, gang = facts.current, facts.gang

    def done(pod: str) -> bool:
        return pod in current and current[pod].state == PodState.SUCCEEDED

    if facts.policy.success_policy == SuccessPolicy.RANK_ZERO:
        if done(gang.rank_zero.pod):
            pod = current[gang.rank_zero.pod].name  # a spare that took rank 0 keeps its own name
            return Decision(Action.COMPLETE, Reason.RANK_ZERO_SUCCEEDED, f"rank-0 pod {pod} succeeded")
        return None
    workers = [m.pod for m in gang.of_role(Role.WORKER)]
    if workers and all(done(pod) for pod in workers):
        return Decision(
            Action.COMPLETE, Reason.ALL_WORKERS_SUCCEEDED, f"all {len(workers)} Worker pods succeeded"
        )
    return None


def scheduling_timeout(facts: Facts) -> Decision | Due | None:
    """runPolicy.schedulingTimeoutSeconds: a pod of the attempt left unscheduled that long fails the job."""
    seconds = facts.policy.scheduling_timeout_seconds
    if seconds is None:
        return None
    limit = timedelta(seconds=seconds)
    timers: list[float] = []
    for pod in facts.current.values():
        if pod.unschedulable and pod.created is not None:
            if facts.now >= pod.created + limit:
                message = f"pod {pod.name} was not scheduled within {seconds}s: {pod.message}"
                return Decision(Action.FAIL, Reason.SCHEDULING_TIMEOUT, message)
            timers.append((pod.created + limit - facts.now).total_seconds())
    return Due(min(timers)) if timers else None
