"""What a queued job's status says it waits for, in Kueue's words: the LocalQueue and its ClusterQueue,
the quota or the admission checks pending, or why its Workload is inactive. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def inactive(status: Mapping[str, Any]) -> str:
    """Why a Workload is inactive: a rejected admission check, the eviction Kueue deactivated it with
    (waitForPodsReady's requeuing limit), or the job's suspension."""
    rejected = [
        f"{check.get('name')}: {check.get('message') or 'Rejected'}"
        for check in status.get("admissionChecks") or []
        if check.get("state") == "Rejected"
    ]
    evicted: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Evicted"), {}
    )
    return "the Workload is inactive: " + (
        f"Kueue deactivated it (admission check {'; '.join(rejected)})" if rejected
        else str(evicted.get("message") or "") or "the job is suspended, or Kueue deactivated it"
    )  # fmt: skip


def where(queue: str, routes: Mapping[str, str] | None) -> str:
    """The LocalQueue and, once read, the ClusterQueue it hands its Workloads to (the one whose quota counts)."""
    if routes is None:
        return f"LocalQueue {queue}"
    if queue not in routes:
        return f"LocalQueue {queue} (no such LocalQueue in the job's namespace)"
    return f"LocalQueue {queue} (ClusterQueue {routes[queue]})"


def waiting_for(where: str, cluster_queue: str | None, quota_message: str, status: Mapping[str, Any]) -> str:
    if cluster_queue is None:
        return f"waiting in {where} for quota" + (f": {quota_message}" if quota_message else "")
    checks = [
        f"{check.get('name')}: {check.get('state')}"
        + (f" ({check['message']})" if check.get("message") else "")
        for check in status.get("admissionChecks") or []
        if check.get("state") != "Ready"
    ]
    return f"quota reserved in ClusterQueue {cluster_queue}; waiting for admission checks: " + (
        "; ".join(checks) or "none pending yet"
    )
