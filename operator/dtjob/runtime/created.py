"""The pods a pass created that the pod watch has not delivered yet: present for a while, then asked for."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from dtjob.core.observed import owned_by, pod_essentials

# The pods a pass created that the pod watch has not delivered after this long are forgotten (its events
# came before the pass recorded them, or the pod went again): the pod watch is the truth then. Watch lag
# is milliseconds; a stale entry would hold a restarting gang back for this long.
CREATED_MEMORY: Final = timedelta(seconds=10)


Created = dict[str, tuple[datetime, dict[str, Any]]]

"""The pods a pass created that the pod watch had not delivered, by uid, with when they were created."""


def children_seen(
    uid: str,
    others: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    created: Created,
    now: datetime,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job's Service, NetworkPolicy and pods as watched, and the pods it created that the watch lacks yet; forgets
    the created pods the watch has now and those it has not delivered after CREATED_MEMORY, which it
    returns apart (overdue: the pass asks the API server whether they exist)."""
    seen = {pod["metadata"]["uid"] for pod in pods}
    overdue = []
    for pod_uid, (created_at, pod) in list(created.items()):
        if pod_uid in seen or now - created_at > CREATED_MEMORY:
            del created[pod_uid]
            if pod_uid not in seen and owned_by(pod, uid):
                overdue.append(pod)
    pending = [pod for _, pod in created.values()]
    return [child for child in [*others, *pods, *pending] if owned_by(child, uid)], overdue


def remember_created(
    created: Created, new: list[dict[str, Any]], watched: list[dict[str, Any]], now: datetime
) -> None:
    """Remember the pods a pass created, unless the watch has delivered them already."""
    seen = {pod["metadata"]["uid"] for pod in watched}
    for pod in new:
        if pod["metadata"]["uid"] not in seen:
            created[pod["metadata"]["uid"]] = (now, pod_essentials(pod))
