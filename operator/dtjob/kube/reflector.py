"""Every kind the operator reads, kept by one kind of reader: a list, then a watch, in a thread of its own.

Like client-go's reflector: each (re)listing replaces what was known, so an object deleted while the watch
was down (a 410 Gone, a lost connection, an outage) is reported deleted, and one that changed in the gap
is reported changed. A watch resumes from the last resourceVersion it saw; only a 410 or an error lists
again. Each change is handed to `on_change(key, kept)` (`kept` None: deleted) after `keep` has cut the
object to what the operator reads, and every completed listing ends with `on_listed()`. Both are called
from the reflector's thread, in the order the apiserver told; the caller moves them to its event loop.

A reader that cannot list or watch says so in `trouble()`: the operator's health check reports it, so a
missing RBAC verb shows as an unready operator instead of one that waits forever while looking green.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from kubernetes.client import ApiException
from kubernetes.watch.watch import iter_resp_lines

from dtjob.kube.client import REQUEST_TIMEOUT, WATCH_SILENCE_SECONDS
from dtjob.kube.refusals import refusal

# The apiserver ends a watch after this long; it is then resumed from the last resourceVersion seen.
WATCH_SECONDS: Final = 300
RETRY_SECONDS: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
# A reader failing for this long without a listing is trouble the health check reports.
TROUBLE_AFTER_SECONDS: Final = 30.0

log = logging.getLogger(__name__)
Lister = Callable[..., Any]
"""A client list method bound to its namespace and selector (e.g. partial(core().list_namespaced_pod, ns))."""


def object_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


def relisted(
    known: dict[str, str], items: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str], dict[str, str]]:
    """What a listing tells a reader that knew `known` (resourceVersions by key): the objects that are new
    or changed since, the keys of those gone, and what is known now. An unchanged object is not news."""
    now = {object_key(obj): str(obj["metadata"]["resourceVersion"]) for obj in items}
    changed = [obj for obj in items if known.get(object_key(obj)) != now[object_key(obj)]]
    return changed, sorted(known.keys() - now.keys()), now


class Reflector:
    def __init__(
        self,
        what: str,
        lister: Lister,
        keep: Callable[[dict[str, Any]], Any],
        on_change: Callable[[str, Any], object],
        on_listed: Callable[[], object],
        label_selector: str | None = None,
    ) -> None:
        self.what = what
        self._lister, self._keep, self._selector = lister, keep, label_selector
        self._on_change, self._on_listed = on_change, on_listed
        self._versions: dict[str, str] = {}  # what the apiserver last told of each object
        self._stopping = threading.Event()
        self._response: Any = None
        self._failing_since: float | None = None
        self._error = ""
        self._refused = False
        self.listings = 0
        self._thread = threading.Thread(target=self._run, name=f"watch {what}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        # Unblock the read the thread waits in. Not response.close(): that waits for the TLS object the
        # reading thread holds. A shutdown of the socket underneath ends the read at once.
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def trouble(self, now: float | None = None) -> str | None:
        """Why this reader cannot list: refused (RBAC), or failing for TROUBLE_AFTER_SECONDS; else None."""
        since = self._failing_since
        now = time.monotonic() if now is None else now
        if since is None or (not self._refused and now - since < TROUBLE_AFTER_SECONDS):
            return None
        listed = "never listed" if not self.listings else "no listing since the watch broke"
        return f"cannot read {self.what} ({listed}, {now - since:.0f}s): {self._error}"

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                version: str | None = self._list()
                failures, self._failing_since = 0, None
                while version is not None and not self._stopping.is_set():
                    version = self._watch(version)
            except Exception as err:  # the apiserver is away or refuses: list again after a pause
                if self._stopping.is_set():
                    return
                delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                failures += 1
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                self._error = refusal(err) or f"{type(err).__name__}: {err}"
                # The apiserver said no (RBAC), or does not serve the kind: waiting will not mend it soon.
                self._refused = isinstance(err, ApiException) and err.status in (401, 403, 404)
                log.warning("watch of %s failed (%s); listing again in %.1fs", self.what, self._error, delay)
                self._stopping.wait(delay)

    def _list(self) -> str:
        try:
            response: Any = self._lister(label_selector=self._selector, _preload_content=False)
        except ApiException as err:
            if err.status == 404:  # the kind is not served (its CRD deleted): none of it exists any more
                self._forget_all()
            raise
        listed = json.loads(response.data)
        items = listed.get("items") or []
        changed, gone, self._versions = relisted(self._versions, items)
        for obj in changed:
            self._on_change(object_key(obj), self._keep(obj))
        for key in gone:
            self._on_change(key, None)
        self.listings += 1
        self._on_listed()
        return str(listed["metadata"]["resourceVersion"])

    def _forget_all(self) -> None:
        for key in sorted(self._versions):
            self._on_change(key, None)
        self._versions = {}

    def _watch(self, version: str) -> str | None:
        """Follow events from `version`; the version to resume from, or None to list afresh (410 Gone)."""
        self._response = self._lister(
            label_selector=self._selector, watch=True, resource_version=version, allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS, _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SILENCE_SECONDS),  # per read: bookmarks come
        )  # fmt: skip
        try:
            for line in iter_resp_lines(self._response):
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    log.info("watch of %s ended: %s; listing again", self.what, obj.get("message", obj))
                    return None
                version = str(obj["metadata"]["resourceVersion"])
                if kind == "BOOKMARK":
                    continue
                key = object_key(obj)
                if kind == "DELETED":
                    self._versions.pop(key, None)
                    self._on_change(key, None)
                else:
                    self._versions[key] = version
                    self._on_change(key, self._keep(obj))
        finally:
            self._response.release_conn()
            self._response = None
        return version
