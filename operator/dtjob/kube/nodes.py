"""The Ready state of every node, from one raw watch in a thread of its own.

Nodes are the busiest object an operator of this kind watches and the one it needs least of: kubelets
(and kwok) patch every node's status every few seconds to minutes, and a pass needs only each node's
Ready condition and the taints that say it is going away. Through Kopf, each such event costs milliseconds of its per-object machinery; here it
costs one JSON parse. What is kept per node is what `observed.node_view` reads (`node_essentials`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from kubernetes.watch.watch import iter_resp_lines

from dtjob.kube.client import REQUEST_TIMEOUT, WATCH_SILENCE_SECONDS, core
from dtjob.observed import node_essentials

# The apiserver ends a watch after this long; it is then resumed from the last resourceVersion seen.
WATCH_SECONDS: Final = 300
RETRY_SECONDS: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

log = logging.getLogger(__name__)


class NodeWatch:
    """`get(name)`: a node's essentials, or None when no such node is known. `on_trouble(name)` is called
    from the watch's thread for every event of a node that is not Ready or is tainted to go away
    (`observed.DISRUPTION_TAINTS`), and when one is deleted."""

    def __init__(self, on_synced: Callable[[], object], on_trouble: Callable[[str], object]) -> None:
        self._on_synced, self._on_trouble = on_synced, on_trouble
        self._nodes: dict[str, dict[str, Any]] = {}
        self._stopping = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="node watch", daemon=True)

    def get(self, name: str) -> dict[str, Any] | None:
        return self._nodes.get(name)  # one dict read: atomic under the GIL

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if (response := self._response) is not None:
            response.close()  # unblocks the read the thread waits in

    def _run(self) -> None:
        failures, synced = 0, False
        while not self._stopping.is_set():
            try:
                version: str | None = self._list()
                if not synced:
                    synced = True
                    self._on_synced()
                failures = 0
                while version is not None and not self._stopping.is_set():
                    version = self._watch(version)
            except Exception as err:  # the apiserver is away: list again after a pause
                if self._stopping.is_set():
                    return
                delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                failures += 1
                log.warning(
                    "node watch failed (%s: %s); listing again in %.1fs", type(err).__name__, err, delay
                )
                self._stopping.wait(delay)

    def _list(self) -> str:
        response: Any = core().list_node(_preload_content=False)
        listed = json.loads(response.data)
        fresh = {n["metadata"]["name"]: node_essentials(n) for n in listed["items"]}
        for gone in set(self._nodes) - set(fresh):
            self._on_trouble(gone)
        self._nodes = fresh
        return str(listed["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> str | None:
        """Follow events from `version`; the version to resume from, or None to list afresh (410 Gone)."""
        self._response = core().list_node(
            watch=True, resource_version=version, allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS, _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SILENCE_SECONDS),  # per read: bookmarks come
        )  # fmt: skip
        try:
            for line in iter_resp_lines(self._response):
                event = json.loads(line)
                kind, node = event["type"], event["object"]
                if kind == "ERROR":
                    return None
                version = str(node["metadata"]["resourceVersion"])
                if kind == "BOOKMARK":
                    continue
                name = node["metadata"]["name"]
                if kind == "DELETED":
                    self._nodes.pop(name, None)
                    self._on_trouble(name)
                    continue
                self._nodes[name] = essentials = node_essentials(node)
                if not _ready(essentials) or essentials["spec"]["taints"]:
                    self._on_trouble(name)
        finally:
            self._response.release_conn()
            self._response = None
        return version


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in node["status"]["conditions"])
