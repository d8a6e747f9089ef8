"""The console's reads, as kubectl makes them: the kubeconfig from --kubeconfig, else KUBECONFIG, else
~/.kube/config; --context, else the current context; -n, else the context's namespace, else 'default'.
Objects come back as the apiserver's JSON (plain dicts), for dtjob.console.views. Nothing here writes."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from kubernetes import client, config, watch

from dtjob.api import GROUP, PLURAL, VERSION
from dtjob.core.names import JOB_NAME_LABEL

Obj = dict[str, Any]
# A followed log holds a connection each: room for big gangs without urllib3 dropping connections.
CONNECTIONS: Final = 64
# Server-side watch timeout: the stream ends this often and is opened again from where it was.
WATCH_SECONDS: Final = 300


class NotFound(Exception):
    """The job asked for does not exist (the message says where it was looked for)."""


@dataclass(frozen=True)
class Target:
    api: client.ApiClient
    namespace: str
    context: str


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Target:
    configuration = client.Configuration()
    loader: Any = config  # the kubeconfig loader is untyped
    loader.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    configuration.connection_pool_maxsize = CONNECTIONS
    contexts, active = loader.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts if c["name"] == context), active) if context else active
    namespace = namespace or (chosen.get("context") or {}).get("namespace") or "default"
    return Target(client.ApiClient(configuration), namespace, chosen["name"])


class Reader:
    """Jobs, their pods, Events and logs in one namespace (or all, for listing jobs)."""

    def __init__(self, target: Target) -> None:
        self.target, self.namespace = target, target.namespace
        self.core = client.CoreV1Api(target.api)
        self.custom = client.CustomObjectsApi(target.api)

    def jobs(self, all_namespaces: bool) -> list[Obj]:
        try:
            listed: Any
            if all_namespaces:
                listed = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
            else:
                listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)
        except client.ApiException as err:
            raise self._missing(err, None) from None
        return list(listed["items"])

    def job(self, name: str) -> Obj:
        try:
            job: Any = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        except client.ApiException as err:
            raise self._missing(err, name) from None
        return cast(Obj, job)

    def _missing(self, err: client.ApiException, name: str | None) -> Exception:
        """404 for the job, or for its whole kind (no CRD: the apiserver's plain '404 page not found')."""
        if err.status != 404:
            return err
        where = f'namespace "{self.namespace}" (context "{self.target.context}")'
        if name is not None and '"kind":"Status"' in str(err.body).replace(" ", ""):
            return NotFound(f'distributedtrainingjob "{name}" not found in {where}')
        return NotFound(
            f'this cluster has no DistributedTrainingJob API (context "{self.target.context}"): install the '
            "dtjob chart, or its CRD (crds/ in the repository)"
        )

    def pods(self, job_name: str) -> list[Obj]:
        response: Any = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{JOB_NAME_LABEL}={job_name}", _preload_content=False
        )
        return list(json.loads(response.data)["items"])

    def events(self, job: Obj) -> list[Obj]:
        response: Any = self.core.list_namespaced_event(
            self.namespace,
            field_selector=f"involvedObject.uid={job['metadata']['uid']}",
            _preload_content=False,
        )
        return list(json.loads(response.data)["items"])

    def log(self, pod: Mapping[str, Any], container: str, follow: bool) -> Iterator[str]:
        """The container's log, line by line; with `follow`, until the container ends."""
        response: Any = self.core.read_namespaced_pod_log(
            pod["metadata"]["name"],
            self.namespace,
            container=container,
            follow=follow,
            _preload_content=False,
        )
        pending = b""
        try:
            for chunk in response.stream(4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
            if pending:
                yield pending.decode(errors="replace")
        finally:
            response.release_conn()

    def watch_job(self, name: str) -> Iterator[Obj | None]:
        """The job now, then each new version of it; None once it is deleted (the stream ends)."""
        yield from self._watch(
            lambda **kw: self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, **kw
            ),
            f"metadata.name={name}",
            None,
        )

    def watch_pods(self, job_name: str) -> Iterator[Obj | None]:
        """The job's pods now, then each change to one (a deleted pod comes with a deletionTimestamp)."""
        yield from self._watch(
            lambda **kw: self.core.list_namespaced_pod(self.namespace, **kw),
            None,
            f"{JOB_NAME_LABEL}={job_name}",
        )

    def _watch(
        self, lister: Callable[..., Any], field_selector: str | None, label_selector: str | None
    ) -> Iterator[Obj | None]:
        """List, then watch from the list's resourceVersion, opening the watch again where it ended; after
        410 Gone, list again. For a single object (a field selector): None once it is gone."""
        selectors = {
            k: v for k, v in {"field_selector": field_selector, "label_selector": label_selector}.items() if v
        }
        while True:
            listed = json.loads(lister(**selectors, _preload_content=False).data)
            if field_selector and not listed["items"]:
                yield None
                return
            yield from listed["items"]
            version = listed["metadata"]["resourceVersion"]
            while version:
                watcher: Any = watch.Watch()  # type: ignore[no-untyped-call]
                stream = watcher.stream(
                    lister, **selectors, resource_version=version, timeout_seconds=WATCH_SECONDS,
                    allow_watch_bookmarks=True,
                )  # fmt: skip
                try:
                    for event in stream:
                        obj = event["object"]
                        if not isinstance(obj, dict):
                            obj = self.target.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
                        version = obj["metadata"].get("resourceVersion", version)
                        if event["type"] == "BOOKMARK":
                            continue
                        if event["type"] == "DELETED":
                            obj["metadata"].setdefault("deletionTimestamp", "deleted")
                            if field_selector:
                                yield None
                                return
                        yield obj
                except client.ApiException as err:
                    if err.status != 410:
                        raise
                    version = ""  # expired: list again


def background(
    items: Iterator[Any], into: queue.Queue[tuple[str, Any]], kind: str, end: Any = None
) -> threading.Thread:
    """Drain `items` on a daemon thread into `into` as (kind, item), then (kind + '-end', end); or
    (kind + '-error', the exception) if it fails, so the reader of the queue fails loudly instead of
    waiting for ever."""

    def drain() -> None:
        try:
            for item in items:
                into.put((kind, item))
            into.put((f"{kind}-end", end))
        except Exception as err:  # handed to the consumer, which raises it
            into.put((f"{kind}-error", err))

    thread = threading.Thread(target=drain, name=f"dtjob-{kind}", daemon=True)
    thread.start()
    return thread
