"""Write a job's children and status, read what the watch caches cannot vouch for, post events.

All calls are blocking (the official client) and go through one client-side rate limit; the Kopf adapter
runs them in its worker threads. Reads in the steady state come from the adapter's watch caches, not
from here: this module reads only a job after a write conflict, a node the node cache does not hold, a
pod the operator created that the pod watch has not delivered after a while (the watch lags after an
outage), and the cluster's GKE Network objects and GPUDirect DaemonSets once an attempt of a job whose
network profile needs them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, cast

import urllib3
from kubernetes import client
from pydantic import ValidationError

from dtjob import kueue
from dtjob.api import CRD_NAME, GROUP, KIND, PLURAL, VERSION
from dtjob.kube.client import api_client, apps, core, custom, networking, resource
from dtjob.kube.throttle import TokenBucket
from dtjob.names import JOB_NAME_LABEL, JobRef
from dtjob.nccl import (
    NETWORK_GROUP,
    NETWORK_PLURAL,
    NETWORK_VERSION,
    PREREQUISITE_DAEMONSETS,
    PREREQUISITE_NAMESPACES,
    Installer,
)
from dtjob.plan import Delete, Event, Plan, Relabel, status_patch
from dtjob.settings import DEFAULT_API_BURST, DEFAULT_API_QPS

FIELD_MANAGER = "dtjob-operator"
# Statuses of a create refused for what the object says (Bad Request, Unprocessable Entity: invalid).
SPEC_REFUSALS: Final = frozenset({400, 422})
ENV_PATH: Final = re.compile(r"spec\.(containers|initContainers)\[(\d+)\]\.env\[(\d+)\]")
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
# Aggregated events remembered (LRU); one forgotten just starts a new Event with count 1.
EVENT_MEMORY: Final = 4096

log = logging.getLogger(__name__)
_bucket = TokenBucket(DEFAULT_API_QPS, DEFAULT_API_BURST)


def unfenced() -> bool:
    return True


fence: Callable[[], bool] = unfenced
"""Whether this process may still write: with leader election, whether it holds the Lease (checked
before every write, after the rate limit's wait; the adapter sets it)."""


class Deposed(Exception):
    """This replica lost the Lease during a pass: nothing more of the pass is written."""


def _take(write: bool = True) -> None:
    """A token of the rate limit; for a write, then a look at the fence: the wait may have been long."""
    _bucket.take()
    if write and not fence():
        raise Deposed


def limit_rate(qps: float, burst: int) -> None:
    global _bucket
    _bucket = TokenBucket(qps, burst)


class Refused(Exception):
    """The apiserver, or the client's schema check, refused a pod rendered from the job's spec: the same
    spec will be refused again (the message names the field)."""


@dataclass
class Executed:
    """What a plan's execution learnt, for the caches: the pods it created and the job as written."""

    created: list[dict[str, Any]] = field(default_factory=list)
    job: dict[str, Any] | None = None
    """The job as the status patch left it; None when no status was written."""
    conflict: bool = False
    """The job changed since the pass read it: its status and events were not written."""
    gone: bool = False
    """The job is deleted (404 on its status): nothing more was written."""


def read_job(namespace: str, name: str) -> dict[str, Any] | None:
    _take(write=False)
    try:
        job = custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return cast(dict[str, Any], job)


@dataclass(frozen=True)
class PodIdentity:
    """Who a pod-bound service account token belongs to, as the apiserver's TokenReview says."""

    namespace: str
    pod: str
    pod_uid: str


def review_token(token: str, audience: str) -> PodIdentity | None:
    """The pod a token was issued to, if the apiserver finds it valid for `audience` and bound to a pod
    that still exists (a projected token is); None otherwise."""
    _take(write=False)
    review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[audience]))
    status = client.AuthenticationV1Api(api_client()).create_token_review(review).status
    if status is None or not status.authenticated or status.user is None:
        return None
    extra = status.user.extra or {}
    pod, uid = (
        extra.get("authentication.kubernetes.io/pod-name"),
        extra.get("authentication.kubernetes.io/pod-uid"),
    )
    parts = (status.user.username or "").split(":")  # system:serviceaccount:<namespace>:<name>
    if not pod or not uid or len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
        return None
    return PodIdentity(parts[2], pod[0], uid[0])


def read_nodes(names: Iterable[str]) -> list[dict[str, Any]]:
    """The named nodes, one GET each; a node that is gone is simply absent."""
    api, sanitize = core(), api_client().sanitize_for_serialization
    nodes = []
    for name in names:
        _take(write=False)
        try:
            nodes.append(cast(dict[str, Any], sanitize(api.read_node(name))))
        except client.ApiException as err:
            if err.status != 404:
                raise
    return nodes


def read_pods(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """These pods as they are now, one GET each: one that is gone, or whose name another pod took, is
    absent."""
    api, sanitize = core(), api_client().sanitize_for_serialization
    found = []
    for pod in pods:
        meta = pod["metadata"]
        _take(write=False)
        try:
            now = cast(dict[str, Any], sanitize(api.read_namespaced_pod(meta["name"], meta["namespace"])))
        except client.ApiException as err:
            if err.status != 404:
                raise
            continue
        if now["metadata"].get("uid") == meta.get("uid"):
            found.append(now)
    return found


def list_job_pods(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The job's pods as the apiserver has them now (a consistent listing, not a cache)."""
    meta = job["metadata"]
    _take(write=False)
    listed: Any = core().list_namespaced_pod(
        meta["namespace"], label_selector=f"{JOB_NAME_LABEL}={meta['name']}", _preload_content=False
    )
    return cast(list[dict[str, Any]], json.loads(listed.data).get("items") or [])


def read_networks() -> frozenset[str]:
    """The names of the cluster's GKE Network objects: none where that API is not served (not GKE, or
    GKE without multi-networking)."""
    _take(write=False)
    try:
        listed = cast(
            dict[str, Any],
            custom().list_cluster_custom_object(NETWORK_GROUP, NETWORK_VERSION, NETWORK_PLURAL),
        )
    except client.ApiException as err:
        if err.status == 404:
            return frozenset()
        raise
    return frozenset(item["metadata"]["name"] for item in listed.get("items") or [])


def read_gpudirect_daemonsets() -> dict[str, Installer] | None:
    """The DaemonSets GPUDirect needs (nccl.PREREQUISITES) that the cluster runs, in the namespaces GKE's
    manifests put them (which say Standard or Autopilot), each with its pod template's images (an
    installer's say its plugin version); None when the operator may not list DaemonSets (a chart from
    before this check): then Auto does not judge them."""
    found: dict[str, Installer] = {}
    for namespace in PREREQUISITE_NAMESPACES:
        _take(write=False)
        try:
            listed: Any = apps().list_namespaced_daemon_set(namespace, _preload_content=False)
        except client.ApiException as err:
            if err.status == 403:
                log.warning(
                    "may not list DaemonSets in %s: GPUDirect's installers are not checked", namespace
                )
                return None
            raise
        for item in json.loads(listed.data).get("items") or []:
            if (name := item["metadata"]["name"]) in PREREQUISITE_DAEMONSETS:
                pod = ((item.get("spec") or {}).get("template") or {}).get("spec") or {}
                containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
                found[name] = Installer(namespace, tuple(str(c.get("image", "")) for c in containers))
    return found


def read_device_classes() -> frozenset[str]:
    """The names of the cluster's DRA DeviceClasses (GKE's managed DRANET installs mrdma.google.com): none
    where resource.k8s.io/v1 is not served or the operator may not list them (a chart from before this
    check; logged)."""
    _take(write=False)
    try:
        listed: Any = resource().list_device_class(_preload_content=False)
    except client.ApiException as err:
        if err.status == 403:
            log.warning("may not list DeviceClasses: managed DRANET is not looked for")
            return frozenset()
        if err.status == 404:
            return frozenset()
        raise
    return frozenset(item["metadata"]["name"] for item in json.loads(listed.data).get("items") or [])


def create_pod(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """Create a pod; None when it exists already (a cache that has not seen it yet), which is fine."""
    _take()
    try:
        # The reply as JSON, not as the client's model: building a V1Pod and dumping it back to a dict cost
        # about 3 ms of the operator's CPU a pod, the most of any step while gangs start.
        created: Any = core().create_namespaced_pod(
            pod["metadata"]["namespace"], cast(Any, dict(pod)), _preload_content=False
        )
    except client.ApiException as err:
        if err.status == 409:
            return None
        if err.status in SPEC_REFUSALS:
            raise Refused(_refused_pod(pod, refusal(err) or "")) from None
        raise
    except ValidationError as err:
        raise Refused(_refused_pod(pod, refusal(err) or "")) from None
    return cast(dict[str, Any], json.loads(created.data))


def _refused_pod(pod: Mapping[str, Any], why: str) -> str:
    """The refusal, and the names of the env entries it points at: the rendered pod's env starts with
    the variables the operator injects, so its indexes are not the template's."""
    named = []
    for kind, container, entry in ENV_PATH.findall(why):
        try:
            name = pod["spec"][kind][int(container)]["env"][int(entry)]["name"]
        except (KeyError, IndexError, TypeError):
            continue
        named.append(f"spec.{kind}[{container}].env[{entry}] is the variable {name!r}")
    return f"pod {pod['metadata']['name']}: {why}" + (
        f" ({'; '.join(dict.fromkeys(named))})" if named else ""
    )


def refusal(err: Exception) -> str | None:
    """What refused a request, in the refuser's words: the apiserver (its message names the field), or
    the client's own check of an object against the Kubernetes schema. None for anything else."""
    if isinstance(err, client.ApiException):
        try:
            return f"{err.status} {json.loads(err.body or '')['message']}"
        except (TypeError, ValueError, KeyError):
            return f"{err.status} {err.reason}"
    if isinstance(err, ValidationError):
        return "refused by the Kubernetes client's schema check: " + "; ".join(
            f"{_field_path(problem['loc'])}: {problem['msg']}" for problem in err.errors()
        )
    return None


def link_failure(err: Exception) -> str | None:
    """The link to the apiserver failed (refused, reset, timed out): expected while it restarts or the
    network is cut, and retried; what failed, in one line. None for anything else."""
    if isinstance(err, urllib3.exceptions.HTTPError):
        return f"{type(err).__name__}: {err}"
    return None


def _field_path(loc: tuple[int | str, ...]) -> str:
    """spec.containers[0].env[0].valueFrom, from the client's (argument index, field, index...) path."""
    parts = list(loc[1:] if loc and isinstance(loc[0], int) else loc)
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts).lstrip(".")


def relabel(namespace: str, op: Relabel) -> None:
    """Merge-patch the drifted labels and annotations of the pod we looked at (uid precondition)."""
    metadata: dict[str, Any] = {"uid": op.uid}
    if op.labels:
        metadata["labels"] = op.labels
    if op.annotations:
        metadata["annotations"] = op.annotations
    _take()
    try:
        core().patch_namespaced_pod(op.name, namespace, {"metadata": metadata})
    except client.ApiException as err:
        if err.status not in (404, 409):  # gone, or a namesake: the next pass sees which
            raise


def apply(obj: Mapping[str, Any]) -> None:
    """Server-side apply of the job's Service, NetworkPolicy or ResourceClaimTemplate under one field
    manager, forcing ownership so an edited one drifts back."""
    patch = {"Service": core().patch_namespaced_service,
             "NetworkPolicy": networking().patch_namespaced_network_policy,
             "ResourceClaimTemplate": resource().patch_namespaced_resource_claim_template}[obj["kind"]]  # fmt: skip
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    _take()
    patch(
        name, namespace, dict(obj), field_manager=FIELD_MANAGER, force=True, _content_type=APPLY_CONTENT_TYPE
    )


def delete(namespace: str, op: Delete) -> None:
    """Delete only the object we decided about (uid precondition); gone already is fine."""
    api = core()
    remove = {"Pod": api.delete_namespaced_pod, "Service": api.delete_namespaced_service,
              "NetworkPolicy": networking().delete_namespaced_network_policy}[op.kind]  # fmt: skip
    body = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(uid=op.uid) if op.uid else None,
        grace_period_seconds=op.grace_period_seconds,
        propagation_policy="Background",
    )
    _take()
    try:
        remove(op.name, namespace, body=body)
    except client.ApiException as err:
        if err.status not in (404, 409):  # 409: the uid precondition failed, a new object took the name
            raise


def read_crd() -> dict[str, Any] | None:
    """The installed DistributedTrainingJob CRD; None when there is none."""
    _take(write=False)
    api = client.ApiextensionsV1Api(api_client())
    try:
        answer: Any = api.read_custom_resource_definition(CRD_NAME, _preload_content=False)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return cast(dict[str, Any], json.loads(answer.data))


def apply_crd(definition: Mapping[str, Any]) -> None:
    """Server-side apply of this operator's CRD (RBAC allows it on this one CRD by name only). Not fenced:
    the CRD is no job's, and a new release's replicas start as standbys while the old leader runs."""
    _take(write=False)
    client.ApiextensionsV1Api(api_client()).patch_custom_resource_definition(
        CRD_NAME, dict(definition), field_manager=FIELD_MANAGER, force=True, _content_type=APPLY_CONTENT_TYPE
    )


def kueue_served() -> bool:
    """Whether the cluster serves Kueue's Workloads (discovery, which every authenticated user may read)."""
    _take(write=False)
    try:
        found: Any = custom().get_api_resources(kueue.GROUP, kueue.VERSION)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return any(resource.name == kueue.WORKLOADS for resource in found.resources or [])


def read_priority(wanted: kueue.Priority) -> kueue.Priority:
    """The value of the priority class a queued job names (value None when there is no such class)."""
    _take(write=False)
    try:
        if wanted.source == kueue.WORKLOAD_PRIORITY_SOURCE:
            found: Any = custom().get_cluster_custom_object(
                kueue.GROUP, kueue.VERSION, kueue.WORKLOAD_PRIORITY_CLASSES, wanted.class_name
            )
            value = found["value"]
        else:
            value = client.SchedulingV1Api(api_client()).read_priority_class(wanted.class_name).value
    except client.ApiException as err:
        if err.status == 404:
            return wanted
        raise
    return kueue.Priority(wanted.source, wanted.class_name, int(value))


def create_workload(workload: Mapping[str, Any]) -> None:
    """Create a queued job's Workload; one that exists already (its watch event still coming) is fine."""
    _take()
    try:
        custom().create_namespaced_custom_object(
            kueue.GROUP, kueue.VERSION, workload["metadata"]["namespace"], kueue.WORKLOADS, dict(workload)
        )
    except client.ApiException as err:
        if err.status != 409:
            raise


def activate_workload(namespace: str, name: str, active: bool) -> None:
    """Set a Workload's spec.active (false: Kueue evicts it and admits it no more; true: it queues again)."""
    _take()
    try:
        custom().patch_namespaced_custom_object(
            kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name, {"spec": {"active": active}}
        )
    except client.ApiException as err:
        if err.status != 404:  # gone with its job: nothing to say to Kueue
            raise


def patch_workload_status(namespace: str, body: Mapping[str, Any]) -> None:
    """Merge-patch a Workload's status onto the version the pass decided on; a newer or a gone Workload
    (409, 404) is left to the next pass, which sees it."""
    _take()
    try:
        custom().patch_namespaced_custom_object_status(
            kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, body["metadata"]["name"], dict(body)
        )
    except client.ApiException as err:
        if err.status not in (404, 409):
            raise


class JobGone(Exception):
    """The job was deleted: the apiserver answered 404 for it."""


def patch_status(job: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Write the status the pass decided (the whole of it: what it lacks is removed), only onto the
    version of the job it decided on: the job as written, or None when it changed since (409): nothing
    was written, and the pass must decide again."""
    meta = job["metadata"]
    patch = status_patch(job.get("status"), status)
    body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": patch}
    _take()
    try:
        written = custom().patch_namespaced_custom_object_status(
            GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], body
        )
    except client.ApiException as err:
        if err.status == 409:
            return None
        if err.status == 404:
            raise JobGone from None
        raise
    return cast(dict[str, Any], written)


def drop_finalizer(job: Mapping[str, Any], finalizer: str) -> None:
    """Remove one finalizer from the job (its resourceVersion as the guard: a conflict is retried by the
    next pass, which sees the newer job)."""
    meta = job["metadata"]
    kept = [f for f in meta.get("finalizers") or [] if f != finalizer]
    patch = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
    _take()
    try:
        custom().patch_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], patch
        )
    except client.ApiException as err:
        if err.status not in (404, 409):
            raise


def delete_job(namespace: str, name: str, uid: str) -> None:
    _take()
    try:
        custom().delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid), propagation_policy="Background"),
        )  # fmt: skip
    except client.ApiException as err:
        if err.status not in (404, 409):
            raise


class EventRecorder:
    """Posts the operator's Events; the same event again on the same job bumps the first one's count.

    As kubectl shows a recurring event: one object with `count` and `lastTimestamp`, not one per
    occurrence. Which Event stands for which (job, type, reason, message) is remembered in memory.
    """

    def __init__(self, capacity: int = EVENT_MEMORY) -> None:
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
        _take()
        try:
            core().patch_namespaced_event(name, namespace, patch)
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
        _take()
        created = core().create_namespaced_event(meta["namespace"], body)
        return str(created.metadata.name), 1


EVENTS = EventRecorder()
# Pod creates in flight at once, all passes together: at 20-50 ms a create this is past the default rate
# limit already; more only piles requests onto a busy apiserver (bench.scale, 100 jobs x 8 pods on 2
# cores: all Running p50 9.4 s with 4, 15.5 s with 16).
CREATES_AT_ONCE: Final = 4
# Each pass keeps at most this many of its creates queued or in flight, so the creators serve the big
# gangs in turn and a one-pod job's create waits behind a few of each, not behind whole gangs; a gang of
# up to this many goes out whole, gangs in the order their passes came (with 2, a mass start of 8-pod
# gangs interleaved them all, and bench.scale's p50 rose).
CREATES_QUEUED_A_PASS: Final = 8
_creators = ThreadPoolExecutor(CREATES_AT_ONCE, thread_name_prefix="create")


def create_pods(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Create a gang's pods through the shared creators, CREATES_QUEUED_A_PASS at a time; the pods created
    (not those that existed). The first failure is raised once the creates under way have ended."""
    queued: deque[Future[dict[str, Any] | None]] = deque()
    created: list[dict[str, Any] | None] = []
    try:
        for pod in pods:
            if len(queued) == CREATES_QUEUED_A_PASS:
                created.append(queued.popleft().result())
            queued.append(_creators.submit(create_pod, pod))
        created.extend(future.result() for future in list(queued))
    finally:
        wait(queued)
    return [pod for pod in created if pod is not None]


@contextlib.contextmanager
def _given_up(slot: threading.Semaphore | None) -> Iterator[None]:
    if slot is None:
        yield
        return
    slot.release()
    try:
        yield
    finally:
        slot.acquire()


def execute(job: Mapping[str, Any], plan: Plan, slot: threading.Semaphore | None = None) -> Executed:
    """Carry out a plan in a safe order: delete stale children first, then create and mend, then record
    the outcome (guarded by the job's resourceVersion: a conflict leaves status and events unwritten).
    `slot`, the pass slot the caller holds, is given up while the pods are created."""
    meta = job["metadata"]
    namespace = meta["namespace"]
    done = Executed()
    for op in plan.delete:
        delete(namespace, op)
    for service in plan.apply:
        apply(service)
    if plan.workload is not None:
        create_workload(plan.workload)
    if plan.create:
        with _given_up(slot):
            done.created = create_pods(plan.create)
    for drifted in plan.relabel:
        relabel(namespace, drifted)
    if plan.workload_active is not None:  # before the status: a resume is recorded once Kueue was told
        activate_workload(namespace, kueue.workload_name(JobRef.of(job)), plan.workload_active)
    if plan.status is not None:
        try:
            done.job = patch_status(job, plan.status)
        except JobGone:
            done.gone = True
            return done
        if done.job is None:
            done.conflict = True
            return done
    if plan.workload_status is not None:
        patch_workload_status(namespace, plan.workload_status)
    for event in plan.events:
        EVENTS.post(done.job or job, event)
    if plan.delete_job:
        delete_job(namespace, meta["name"], meta["uid"])
    return done
