"""Which queue a queued job is in (its label, a LocalQueue's name), and whether its Workload still matches
it, as Kueue's job integrations decide both (jobframework's reconciler: the queue name immutable while the
job runs, a Workload brought back to its job while suspended). A pass asks it all at once (`of_pass`).
Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from dtjob.core.kueue import POD_SETS_ANNOTATION, QUEUE_LABEL, Queueing, State, queue_of, read
from dtjob.core.kueue_priority import Priority
from dtjob.core.world import KueueFacts


@dataclass(frozen=True)
class PassQueue:
    """What a pass asks of the job's queue, answered at once."""

    label_problem: str | None
    """Why the queue label cannot name a LocalQueue (the job is Invalid for it), or None."""
    default: str | None
    """The queue label a job just created gets (`default_queue`), or None."""
    queueing: Queueing | None
    """Where Kueue stands with the job's Workload, for a job in a queue (the queue in force)."""
    priority_may_change: bool
    """The Workload takes a new priority class now (`priority_may_change`)."""


def of_pass(job: Mapping[str, Any], kueue: KueueFacts, unqueued_gang_running: bool) -> PassQueue:
    """The pass's queue: `unqueued_gang_running`, the attempt has live pods and Kueue never admitted it
    (see `queue_in_force`)."""
    queueing = None
    if queue := queue_in_force(job, kueue.workload, unqueued_gang_running):
        queueing = read(queue, kueue.workload, kueue.flavors, kueue.served, kueue.routes)
        if (waits := label_waits(job, queue)) is not None:
            queueing = replace(queueing, message=f"{queueing.message}; {waits}")
    return PassQueue(
        queue_name_problem(job), default_queue(job, kueue.routes), queueing, priority_may_change(queueing)
    )


def holds_quota(workload: Mapping[str, Any] | None) -> bool:
    """Whether Kueue has reserved quota for the Workload (admitted, waiting for its admission checks, or
    evicted with its gang still there): its queue and podSets are then fixed, as Kueue's webhook keeps
    them (HasQuotaReservation)."""
    if workload is None:
        return False
    status = workload.get("status") or {}
    reserved = any(
        c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return reserved or bool(status.get("admission"))


def queue_in_force(
    job: Mapping[str, Any], workload: Mapping[str, Any] | None, unqueued_gang_running: bool
) -> str | None:
    """The queue a pass treats the job as in: its label, as Kueue's integrations take a queue-name change,
    only while the job holds no quota and has no gang running. A Workload holding quota keeps the job in
    the Workload's queue (Kueue refuses the change on a running job); a gang that runs unqueued (never
    admitted) stays so, a label added to it taking effect when the gang next stops (a suspension or a
    restart). A gang Kueue admitted whose Workload is gone is queued again, as Kueue stops a running job
    with no Workload."""
    if holds_quota(workload):
        return str(workload["spec"]["queueName"])  # type: ignore[index]
    if workload is None and unqueued_gang_running:
        return None
    return queue_of(job)


def label_waits(job: Mapping[str, Any], queue: str) -> str | None:
    """What the job's queue label asks that `queue_in_force` holds back while its Workload holds quota,
    said in its status; or None."""
    label = queue_of(job)
    if label == queue:
        return None
    asked = f"LocalQueue {label}" if label else "no queue"
    return (
        f"metadata.labels[{QUEUE_LABEL}] asks for {asked}; the job stays in LocalQueue {queue} while its "
        "Workload holds quota, as Kueue keeps a running job's queue (suspend the job to move it)"
    )


def follows_job(workload: Mapping[str, Any], rendered: Mapping[str, Any]) -> bool:
    """Whether the Workload still says what the job's pods are and where they queue: its queue and its
    podSets' digest (a Workload of an earlier release has none: it is brought up to date)."""
    digest = (workload["metadata"].get("annotations") or {}).get(POD_SETS_ANNOTATION)
    queue = (workload.get("spec") or {}).get("queueName")
    wanted = rendered["metadata"]["annotations"][POD_SETS_ANNOTATION]
    return bool(queue == rendered["spec"]["queueName"] and digest == wanted)


# A LocalQueue's name, as Kueue validates a Workload's spec.queueName: a DNS-1123 subdomain.
_DNS_1123_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def queue_name_problem(job: Mapping[str, Any]) -> str | None:
    """Why the queue the job names cannot be a LocalQueue's name (a label value may hold what a name may
    not: capitals, underscores), or None."""
    queue = queue_of(job)
    if queue is None or (len(queue) <= 253 and _DNS_1123_SUBDOMAIN.fullmatch(queue)):
        return None
    return (
        f"metadata.labels[{QUEUE_LABEL}]: {queue!r} cannot name a LocalQueue: a LocalQueue's name is a "
        "DNS-1123 subdomain (lowercase letters, digits, '-' and '.')"
    )


def priority_may_change(queueing: Queueing | None) -> bool:
    """Whether the job's Workload takes a new priority class now: it exists, is not finished, and holds no
    quota (Kueue's schema fixes the class once quota is reserved)."""
    if queueing is None or queueing.workload is None or queueing.state == State.FINISHED:
        return False
    return not holds_quota(queueing.workload)


def priority_moved(workload: Mapping[str, Any], wanted: Priority) -> bool:
    """Whether the job names a class (its priority-class label or its pods' priorityClassName) other than the
    Workload's, as Kueue's integrations follow a changed label while the job waits. A job that names none
    keeps the class its Workload was made with (the cluster's default then)."""
    if wanted.global_default:
        return False
    spec = workload.get("spec") or {}
    return (spec.get("priorityClassSource"), spec.get("priorityClassName")) != (
        wanted.source,
        wanted.class_name,
    )


def priority_patch(workload: Mapping[str, Any], given: Priority | None) -> dict[str, Any]:
    """The Workload's spec fields for the class read (`given`, when the pass asked for one that moved and
    it exists), or nothing."""
    if given is None or given.value is None or not priority_moved(workload, given):
        return {}
    return {
        "priorityClassName": given.class_name,
        "priorityClassSource": given.source,
        "priority": given.value,
    }


# The LocalQueue a new job without a queue label is put in where its namespace has one so named: Kueue's
# LocalQueueDefaulting (beta and on by default since v0.12), which its webhooks apply to every job they admit.
DEFAULT_LOCAL_QUEUE: Final = "default"


def default_queue(job: Mapping[str, Any], routes: Mapping[str, str] | None) -> str | None:
    """The queue label a job just created gets, as Kueue's webhooks default one (jobframework's
    ApplyDefaultLocalQueue): none named, no status yet (the operator has never acted on it), and a
    LocalQueue named `default` in its namespace; or None."""
    if routes is None or queue_of(job) is not None or job.get("status"):
        return None
    if (job["metadata"].get("labels") or {}).get(QUEUE_LABEL) is not None:
        return None  # named, but empty: left as the user wrote it
    return DEFAULT_LOCAL_QUEUE if DEFAULT_LOCAL_QUEUE in routes else None
