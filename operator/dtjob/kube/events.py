"""The operator's Events on its jobs, aggregated as kubectl shows a recurring event."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import urllib3
from kubernetes import client

from dtjob.api import GROUP, KIND, VERSION
from dtjob.core.plan import Event
from dtjob.kube.client import core
from dtjob.kube.gate import FIELD_MANAGER, Gate

# Aggregated events remembered (LRU); one forgotten just starts a new Event with count 1.
EVENT_MEMORY: Final = 4096

log = logging.getLogger(__name__)


class EventRecorder:
    """Posts the operator's Events; the same event again on the same job bumps the first one's count.

    As kubectl shows a recurring event: one object with `count` and `lastTimestamp`, not one per
    occurrence. Which Event stands for which (job, type, reason, message) is remembered in memory.
    """

    def __init__(self, gate: Gate, capacity: int = EVENT_MEMORY) -> None:
        self._gate = gate
        self._seen: OrderedDict[tuple[str, ...], tuple[str, int]] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def post(self, job: Mapping[str, Any], event: Event) -> None:
        meta = job["metadata"]
        key = (meta["namespace"], meta["uid"], event.type, event.reason, event.message)
        with self._lock:
            known = self._seen.pop(key, None)
        try:
            bumped = self._bump(meta["namespace"], *known) if known else None
            name, count = bumped or self._create(job, event)
        # Events are best effort: never fail a reconcile over one. That includes the link going down
        # after the status was written: a retried pass would not post it again, only back off.
        except (client.ApiException, urllib3.exceptions.HTTPError) as err:
            why = err.reason if isinstance(err, client.ApiException) else type(err).__name__
            log.warning(
                "could not post event %s on %s/%s: %s", event.reason, meta["namespace"], meta["name"], why
            )
            return
        with self._lock:
            self._seen[key] = (name, count)
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)

    def _bump(self, namespace: str, name: str, count: int) -> tuple[str, int] | None:
        """None when the Event is gone (Events expire after an hour): then a new one starts."""
        patch = {"count": count + 1, "lastTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        deadline = self._gate.write()
        try:
            core().patch_namespaced_event(name, namespace, patch, **deadline)
        except client.ApiException as err:
            if err.status != 404:
                raise
            return None
        return name, count + 1

    def _create(self, job: Mapping[str, Any], event: Event) -> tuple[str, int]:
        meta = job["metadata"]
        now = datetime.now(UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}", kind=KIND, name=meta["name"], namespace=meta["namespace"],
                uid=meta["uid"], resource_version=meta.get("resourceVersion"),
            ),
            type=event.type, reason=event.reason, message=event.message[:1024],
            first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component=FIELD_MANAGER), reporting_component=FIELD_MANAGER,
        )  # fmt: skip
        deadline = self._gate.write()
        created = core().create_namespaced_event(meta["namespace"], body, **deadline)
        return str(created.metadata.name), 1
