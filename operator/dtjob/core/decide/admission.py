"""Rules of Kueue's admission: a gang runs only while its Workload is admitted."""

from __future__ import annotations

from dtjob.core.decide.decision import Action, Decision, Facts, Reason
from dtjob.core.decide.failure import preemptions_spent
from dtjob.core.kueue import State as QueueState


def workload_finished(facts: Facts) -> Decision | None:
    queueing = facts.queueing
    if queueing is None or queueing.state != QueueState.FINISHED:
        return None
    # Not this operator's doing (it marks the Workload only once the job has ended): the quota is
    # released, and waiting Queued would be waiting for good. The job ends, saying why.
    message = f"its Kueue Workload was marked Finished before the job ended: {queueing.message}"
    return Decision(Action.FAIL, Reason.WORKLOAD_FINISHED, message)


def not_admitted(facts: Facts) -> Decision | None:
    """Queued: no pod may exist. Evicted under a live gang: an interruption, as a preemption."""
    queueing = facts.queueing
    if queueing is None or queueing.state == QueueState.ADMITTED:
        return None
    live = facts.observed.live_of_attempt(facts.gang.attempt)
    if queueing.state == QueueState.EVICTED and live:
        # Kueue's eviction (priority preemption, quota reclaimed, a check retracted) is an interruption
        # the trainers did not cause: a preemption, after which the gang waits to be admitted again;
        # charged to maxPreemptions as any other. One for Kueue's own reasons (a gang not ready in
        # waitForPodsReady's timeout, a queue drained, the Workload deactivated) is Kueue's to bound (its
        # requeuingStrategy backs off, then deactivates): counted apart, charged to no budget.
        cause = f"evicted by Kueue: {queueing.message}"
        if queueing.requeued:
            return Decision(Action.RESTART_GANG, Reason.REQUEUED, cause)
        return preemptions_spent(facts, cause) or Decision(Action.RESTART_GANG, Reason.PREEMPTED, cause)
    return Decision(Action.SUSPEND, Reason.QUEUED, queueing.message)
