"""What one pass decided to do (a Plan), in the order the Writer executes it: the Service's and
NetworkPolicy's apply, creates and label patches, then one status patch (only if it changed, guarded by
the job's resourceVersion), and only then the deletes, events, and the job's own deletion when its TTL
expired. The status records a decision before any child goes for it (record, then act): an operator
stopped between two writes never leaves a member gone that no status accounts for.

A gang restart is two passes: the first only records attempt N+1 (and the counters) in the status; the
next finds the pods of attempt N stale and deletes them, then creates attempt N+1 once they are gone. The
status write is the commit point, so an operator stopped anywhere in between neither loses nor repeats a
restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dtjob.core.status import Event

__all__ = ["Delete", "Event", "Plan", "Relabel"]


@dataclass(frozen=True)
class Delete:
    kind: str
    name: str
    uid: str | None
    """A precondition: delete only the object we decided about, not a namesake created since."""
    grace_period_seconds: int | None = None
    """None: the pod's own grace period. 0: force, for a pod stuck terminating on a lost node."""


@dataclass(frozen=True)
class Relabel:
    """A merge patch of the labels and annotations the operator owns on a live pod that drifted."""

    name: str
    uid: str
    """A precondition: patch only the pod we looked at."""
    labels: dict[str, str | None]
    """None removes the label (a spare's, once it takes a rank)."""
    annotations: dict[str, str]


@dataclass(frozen=True)
class Plan:
    create: list[dict[str, Any]] = field(default_factory=list)
    """Pods to create (each once: one that exists already is fine)."""
    apply: list[dict[str, Any]] = field(default_factory=list)
    """The Service and the NetworkPolicy, server-side applied, when missing or differing from the render;
    the GPU NICs' ResourceClaimTemplate with the pods that claim from it."""
    relabel: list[Relabel] = field(default_factory=list)
    delete: list[Delete] = field(default_factory=list)
    status: dict[str, Any] | None = None
    """The whole new status, or None when it equals the job's current one. It is written as the merge
    patch from the stored status (`status_patch`), so that a field it lacks is gone from the server too."""
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    workload: dict[str, Any] | None = None
    """The Kueue Workload to create, for a job in a Kueue queue that has none yet."""
    workload_spec: dict[str, Any] | None = None
    """A merge patch of the Workload (its name in metadata): spec.active false while the job is suspended
    (Kueue then evicts it and its quota is handed back), true again on resume (Kueue queues it again);
    its queue and podSets brought back to the job's while it holds no quota (onto the resourceVersion
    read)."""
    workload_status: dict[str, Any] | None = None
    """A merge patch of the Workload's status subresource (its resourceVersion a precondition): the quota
    handed back once an evicted gang is gone, or Finished once the job is."""
    job_labels: dict[str, str] | None = None
    """Labels to add to the job itself, onto the version read, before anything else: the queue Kueue
    would default a new job into (workload_match.default_queue). The pass writes nothing else."""
    requeue_after: float | None = None
    """Seconds until a time-based check is due (deadline, TTL, backoff, scheduling timeout, a grace on a
    pod running out); 0 when the next pass has work already (the teardown after a restart is recorded)."""
