"""The operator's picture of the cluster: every kind it reads, each kept by a `Reflector`, grouped by job.

The reflectors run in threads; every change they see is moved to the event loop and applied there, so
the indexes below change in one thread only and a pass reads a consistent snapshot of its job. What is
kept is cut to what a pass reads (client-go's cache transform): a pod's essentials, a Service or
NetworkPolicy without managedFields, each as compact JSON (a fifth of the memory of the dicts at 8,000
pods; a pass parses only its own job's few), a node's Ready condition and disruption taints.

`on_job(key, body)` hears of every job and every change of one (`body` None: deleted, also when the
deletion happened while a watch was away); `on_children(key)` of every change of a job's pods, Service
or NetworkPolicy, and `on_pod(key, uid)` of the pod it was; `on_node_trouble(node)` of a node that is not
Ready, is tainted to go away, or is gone.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dtjob.api import GROUP, PLURAL, VERSION
from dtjob.core import kueue
from dtjob.core.names import JOB_NAME_LABEL
from dtjob.core.observed import node_essentials, pod_essentials
from dtjob.kube.client import core, custom, networking
from dtjob.kube.reflector import Lister, Reflector

JobKey = tuple[str, str]
G = TypeVar("G")
V = TypeVar("V")

# A reader: what it reads (for logs), its lister, what it keeps of an object, where that goes, its selector.
_Reader = tuple[str, Lister, Callable[[dict[str, Any]], Any], Callable[[str, Any], None], str | None]


class Grouped(Generic[G, V]):
    """Objects by key, and by a group each belongs to (a job, a node)."""

    def __init__(self) -> None:
        self._group_of: dict[str, G] = {}
        self._groups: dict[G, dict[str, V]] = {}

    def put(self, key: str, group: G | None, value: V) -> None:
        self.remove(key)
        if group is not None:
            self._group_of[key] = group
            self._groups.setdefault(group, {})[key] = value

    def remove(self, key: str) -> G | None:
        group = self._group_of.pop(key, None)
        if group is not None:
            members = self._groups[group]
            del members[key]
            if not members:
                del self._groups[group]
        return group

    def group(self, key: str) -> G | None:
        return self._group_of.get(key)

    def get(self, key: str) -> V | None:
        group = self._group_of.get(key)
        return None if group is None else self._groups[group].get(key)

    def of(self, group: G) -> list[V]:
        return list(self._groups.get(group, {}).values())

    def __len__(self) -> int:
        return len(self._group_of)


def compact(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy without metadata.managedFields, which no pass reads: most of a stored object's metadata."""
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}


@dataclass(frozen=True)
class PodEntry:
    job: JobKey
    uid: str
    node: str | None
    essentials: str


def _pod_entry(pod: dict[str, Any]) -> PodEntry:
    meta = pod["metadata"]
    job = (meta["namespace"], (meta.get("labels") or {}).get(JOB_NAME_LABEL, ""))
    return PodEntry(
        job, meta.get("uid", ""), (pod.get("spec") or {}).get("nodeName"), compact(pod_essentials(pod))
    )


def _child_entry(obj: dict[str, Any]) -> tuple[JobKey, str]:
    meta = obj["metadata"]
    return (meta["namespace"], (meta.get("labels") or {}).get(JOB_NAME_LABEL, "")), compact(
        without_managed_fields({k: v for k, v in obj.items() if k != "status"})
    )


class Caches:
    def __init__(
        self,
        namespaces: Sequence[str],
        on_job: Callable[[JobKey, dict[str, Any] | None], object],
        on_children: Callable[[JobKey], object],
        on_pod: Callable[[JobKey, str], object],
        on_node_trouble: Callable[[str], object],
        kueue_served: bool = False,
    ) -> None:
        """`kueue_served`: Kueue's API is there, so the jobs' Workloads, the LocalQueues and the
        ResourceFlavors are read."""
        self._on_job, self._on_children, self._on_pod = on_job, on_children, on_pod
        self._on_node_trouble = on_node_trouble
        self.pods: Grouped[JobKey, str] = Grouped()
        self.jobs_by_node: Grouped[str, JobKey] = Grouped()
        self.services: Grouped[JobKey, str] = Grouped()
        self.network_policies: Grouped[JobKey, str] = Grouped()
        self.workloads: Grouped[JobKey, str] = Grouped()
        self.flavors: dict[str, dict[str, Any]] = {}
        self.routes: dict[str, dict[str, str]] = {}
        """By namespace, the ClusterQueue of each LocalQueue: named in a queued job's status."""
        self.nodes: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._listed: set[str] = set()
        self.reflectors = [
            Reflector(
                what,
                lister,
                keep,
                on_change=functools.partial(self._in_loop, apply),
                on_listed=functools.partial(self._in_loop, self._listed_once, what),
                label_selector=selector,
            )
            for what, lister, keep, apply, selector in self._readers(namespaces, kueue_served)
        ]

    def _readers(self, namespaces: Sequence[str], kueue_served: bool) -> list[_Reader]:
        """What to read, with what each keeps of an object and where it goes: every kind in every watched
        namespace (or the cluster), the cluster-wide kinds, Kueue's kinds where it is served."""
        scopes: list[str | None] = list(namespaces) or [None]
        owned = JOB_NAME_LABEL  # a selector on the label's presence: every child carries its job's name
        readers: list[_Reader] = []
        for ns in scopes:
            where = f" in {ns}" if ns else ""
            readers += [
                (f"jobs{where}", _jobs_lister(ns), without_managed_fields, self._job, None),
                (f"pods{where}", _lister(core().list_namespaced_pod, core().list_pod_for_all_namespaces, ns),
                 _pod_entry, self._pod, owned),
                (f"services{where}", _lister(core().list_namespaced_service,
                 core().list_service_for_all_namespaces, ns), _child_entry, self._service, owned),
                (f"networkpolicies{where}", _lister(networking().list_namespaced_network_policy,
                 networking().list_network_policy_for_all_namespaces, ns), _child_entry, self._policy, owned),
            ]  # fmt: skip
            if kueue_served:
                readers += [
                    (f"workloads{where}", _kueue_lister(kueue.WORKLOADS, ns), _workload_entry, self._workload, owned),
                    (f"localqueues{where}", _kueue_lister(kueue.LOCAL_QUEUES, ns), _route, self._route, None),
                ]  # fmt: skip
        if kueue_served:
            readers.append(("resourceflavors", _kueue_lister(kueue.RESOURCE_FLAVORS, None),
                            without_managed_fields, self._flavor, None))  # fmt: skip
        readers.append(("nodes", core().list_node, node_essentials, self._node, None))
        return readers

    def start(self) -> None:
        for reflector in self.reflectors:
            reflector.start()

    def stop(self) -> None:
        for reflector in self.reflectors:
            reflector.stop()

    def trouble(self) -> list[str]:
        return [why for reflector in self.reflectors if (why := reflector.trouble()) is not None]

    def _in_loop(self, apply: Callable[..., object], *args: Any) -> None:
        self._loop.call_soon_threadsafe(apply, *args)

    def _listed_once(self, what: str) -> None:
        self._listed.add(what)
        if len(self._listed) == len(self.reflectors):
            self.synced.set()

    def _job(self, key: str, body: dict[str, Any] | None) -> None:
        namespace, name = key.split("/", 1)
        self._on_job((namespace, name), body)

    def _pod(self, key: str, entry: PodEntry | None) -> None:
        job = self.pods.remove(key)
        self.jobs_by_node.remove(key)
        if entry is not None:
            self.pods.put(key, entry.job, entry.essentials)
            self.jobs_by_node.put(key, entry.node, entry.job)
            job = entry.job
        if job is not None:
            self._on_pod(job, entry.uid if entry else "")
            self._on_children(job)

    def _service(self, key: str, entry: tuple[JobKey, str] | None) -> None:
        self._child(self.services, key, entry)

    def _policy(self, key: str, entry: tuple[JobKey, str] | None) -> None:
        self._child(self.network_policies, key, entry)

    def _workload(self, key: str, entry: tuple[JobKey, str] | None) -> None:
        """Kueue's word on a job (admitted, evicted) wakes it, as a change of its children does."""
        self._child(self.workloads, key, entry)

    def _flavor(self, name: str, flavor: dict[str, Any] | None) -> None:
        if flavor is None:
            self.flavors.pop(name, None)
        else:
            self.flavors[name] = flavor

    def _route(self, key: str, cluster_queue: str | None) -> None:
        namespace, name = key.split("/", 1)
        if cluster_queue is not None:
            self.routes.setdefault(namespace, {})[name] = cluster_queue
        elif (queues := self.routes.get(namespace)) is not None:
            queues.pop(name, None)
            if not queues:
                del self.routes[namespace]

    def _child(self, index: Grouped[JobKey, str], key: str, entry: tuple[JobKey, str] | None) -> None:
        """An edited or deleted Service or NetworkPolicy wakes its job, whose pass puts it back."""
        job = index.remove(key)
        if entry is not None:
            index.put(key, *entry)
            job = entry[0]
        if job is not None:
            self._on_children(job)

    def _node(self, name: str, node: dict[str, Any] | None) -> None:
        if node is None:
            self.nodes.pop(name, None)
            self._on_node_trouble(name)
            return
        self.nodes[name] = node
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in node["status"]["conditions"]
        )
        if not ready or node["spec"]["taints"]:
            self._on_node_trouble(name)

    def jobs_on(self, node: str) -> set[JobKey]:
        return set(self.jobs_by_node.of(node))


def _lister(namespaced: Lister, cluster_wide: Lister, namespace: str | None) -> Lister:
    return functools.partial(namespaced, namespace) if namespace else cluster_wide


def _workload_entry(workload: dict[str, Any]) -> tuple[JobKey, str]:
    """A Workload as a pass reads it: its podSets without their templates (those are the pods')."""
    meta = workload["metadata"]
    job = (meta["namespace"], (meta.get("labels") or {}).get(JOB_NAME_LABEL, ""))
    kept = without_managed_fields(workload)
    spec = workload.get("spec") or {}
    pod_sets = [{k: v for k, v in ps.items() if k != "template"} for ps in spec.get("podSets") or []]
    kept["spec"] = {**spec, "podSets": pod_sets}
    return job, compact(kept)


def _route(local_queue: dict[str, Any]) -> str:
    return str((local_queue.get("spec") or {}).get("clusterQueue") or "")


def _kueue_lister(plural: str, namespace: str | None) -> Lister:
    if namespace:
        return functools.partial(
            custom().list_namespaced_custom_object, kueue.GROUP, kueue.VERSION, namespace, plural
        )
    return functools.partial(custom().list_cluster_custom_object, kueue.GROUP, kueue.VERSION, plural)


def _jobs_lister(namespace: str | None) -> Lister:
    if namespace:
        return functools.partial(custom().list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL)
    return functools.partial(custom().list_cluster_custom_object, GROUP, VERSION, PLURAL)
