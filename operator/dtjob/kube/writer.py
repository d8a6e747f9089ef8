"""Writes a job's children, its Workload and its status, and executes a plan in a safe order.

All calls are blocking (the official client) and pass the process's gate: the rate limit, then the fence
(a replica that lost the Lease writes nothing more). Pod creates go through a small pool shared by every
pass.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Final, cast

from kubernetes import client
from pydantic import ValidationError

from dtjob.api import CRD_NAME, GROUP, PLURAL, VERSION
from dtjob.core import kueue
from dtjob.core.names import (
    ATTEMPT_LABEL,
    JOB_UID_LABEL,
    REPLICA_INDEX_LABEL,
    ROLE_LABEL,
    SPARE_LABEL,
)
from dtjob.core.plan import Delete, Event, Plan, Relabel
from dtjob.core.status.codec import status_patch
from dtjob.kube.client import api_client, core, custom, networking, resource
from dtjob.kube.events import EventRecorder
from dtjob.kube.gate import FIELD_MANAGER, Gate
from dtjob.kube.refusals import SPEC_REFUSALS, Refused, refusal, refused_pod

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
# Pod creates in flight at once, all passes together: at 20-50 ms a create this is past the default rate
# limit already; more only piles requests onto a busy apiserver (bench.scale, 100 jobs x 8 pods on 2
# cores: all Running p50 9.4 s with 4, 15.5 s with 16).
CREATES_AT_ONCE: Final = 4
# Each pass keeps at most this many of its creates queued or in flight, so the creators serve the big
# gangs in turn and a one-pod job's create waits behind a few of each, not behind whole gangs; a gang of
# up to this many goes out whole, gangs in the order their passes came (with 2, a mass start of 8-pod
# gangs interleaved them all, and bench.scale's p50 rose).
CREATES_QUEUED_A_PASS: Final = 8


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


class NameTaken(Exception):
    """A pod to create exists under its name as another job's, attempt's or member's, or is going: the pass
    is not executed as decided (its status would record a pod that is not this attempt's), and is retried."""


# The labels that make a pod this member of this attempt of this job (a spare's: no attempt, no index).
MEMBER_IDENTITY: Final = (JOB_UID_LABEL, ROLE_LABEL, REPLICA_INDEX_LABEL, ATTEMPT_LABEL, SPARE_LABEL)


class JobGone(Exception):
    """The job was deleted: the apiserver answered 404 for it."""


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


class Writer:
    def __init__(self, gate: Gate, events: EventRecorder | None = None) -> None:
        self._gate = gate
        self._events = events or EventRecorder(gate)
        self._creators = ThreadPoolExecutor(CREATES_AT_ONCE, thread_name_prefix="create")

    def close(self) -> None:
        """No pod create is taken any more; those under way end (their pass waits for them)."""
        self._creators.shutdown(wait=False)

    def post_event(self, job: Mapping[str, Any], event: Event) -> None:
        """Best effort: a failure is logged, never raised (EventRecorder)."""
        self._events.post(job, event)

    def create_pod(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create a pod; None when this very member exists already (a cache that has not seen it yet), which
        is fine; NameTaken when another pod holds its name."""
        deadline = self._gate.write()
        try:
            # The reply as JSON, not as the client's model: building a V1Pod and dumping it back to a dict cost
            # about 3 ms of the operator's CPU a pod, the most of any step while gangs start.
            created: Any = core().create_namespaced_pod(
                pod["metadata"]["namespace"], cast(Any, dict(pod)), _preload_content=False, **deadline
            )
        except client.ApiException as err:
            if err.status == 409:
                self._same_member(pod)
                return None
            if err.status in SPEC_REFUSALS:
                raise Refused(refused_pod(pod, refusal(err) or "")) from None
            raise
        except ValidationError as err:
            raise Refused(refused_pod(pod, refusal(err) or "")) from None
        return cast(dict[str, Any], json.loads(created.data))

    def _same_member(self, pod: Mapping[str, Any]) -> None:
        """A create met a pod of that name (409): fine when it is this very member (the cache had not seen
        it yet), else NameTaken. Pod names carry no attempt: the pod found may be an earlier attempt's, or
        an earlier job's of the same name, or on its way out, and the pass must not record it as this
        attempt's."""
        meta = pod["metadata"]
        self._gate.read()
        try:
            found: Any = core().read_namespaced_pod(meta["name"], meta["namespace"], _preload_content=False)
        except client.ApiException as err:
            if err.status != 404:
                raise
            raise NameTaken(f"pod {meta['name']} existed at its create and is gone since") from None
        existing = json.loads(found.data)["metadata"]
        labels, wanted = existing.get("labels") or {}, meta.get("labels") or {}
        if differ := {k: labels.get(k) for k in MEMBER_IDENTITY if labels.get(k) != wanted.get(k)}:
            raise NameTaken(f"pod {meta['name']} exists as another member's ({differ}): not this one")
        if existing.get("deletionTimestamp"):
            raise NameTaken(f"pod {meta['name']} exists and is being deleted: not the one to create")

    def relabel(self, namespace: str, op: Relabel) -> None:
        """Merge-patch the drifted labels and annotations of the pod we looked at (uid precondition)."""
        metadata: dict[str, Any] = {"uid": op.uid}
        if op.labels:
            metadata["labels"] = op.labels
        if op.annotations:
            metadata["annotations"] = op.annotations
        deadline = self._gate.write()
        try:
            core().patch_namespaced_pod(op.name, namespace, {"metadata": metadata}, **deadline)
        except client.ApiException as err:
            if err.status not in (404, 409):  # gone, or a namesake: the next pass sees which
                raise

    def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side apply of the job's Service, NetworkPolicy or ResourceClaimTemplate under one field
        manager, forcing ownership so an edited one drifts back."""
        patch = {"Service": core().patch_namespaced_service,
                 "NetworkPolicy": networking().patch_namespaced_network_policy,
                 "ResourceClaimTemplate": resource().patch_namespaced_resource_claim_template}[obj["kind"]]  # fmt: skip
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        deadline = self._gate.write()
        patch(
            name,
            namespace,
            dict(obj),
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY_CONTENT_TYPE,
            **deadline,
        )

    def delete(self, namespace: str, op: Delete) -> None:
        """Delete only the object we decided about (uid precondition); gone already is fine."""
        api = core()
        removers: dict[str, Callable[..., Any]] = {
            "Pod": api.delete_namespaced_pod,
            "Service": api.delete_namespaced_service,
            "NetworkPolicy": networking().delete_namespaced_network_policy,
            "Workload": _delete_workload,
        }
        remove = removers[op.kind]
        body = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=op.uid) if op.uid else None,
            grace_period_seconds=op.grace_period_seconds,
            propagation_policy="Background",
        )
        deadline = self._gate.write()
        try:
            remove(op.name, namespace, body=body, **deadline)
        except client.ApiException as err:
            if err.status not in (404, 409):  # 409: the uid precondition failed, a new object took the name
                raise

    def apply_crd(self, definition: Mapping[str, Any]) -> None:
        """Server-side apply of this operator's CRD (RBAC allows it on this one CRD by name only). Not fenced:
        the CRD is no job's, and a new release's replicas start as standbys while the old leader runs."""
        self._gate.read()
        client.ApiextensionsV1Api(api_client()).patch_custom_resource_definition(
            CRD_NAME,
            dict(definition),
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY_CONTENT_TYPE,
        )

    def create_workload(self, workload: Mapping[str, Any]) -> None:
        """Create a queued job's Workload; one that exists already (its watch event still coming) is fine."""
        deadline = self._gate.write()
        try:
            custom().create_namespaced_custom_object(
                kueue.GROUP,
                kueue.VERSION,
                workload["metadata"]["namespace"],
                kueue.WORKLOADS,
                dict(workload),
                **deadline,
            )
        except client.ApiException as err:
            if err.status != 409:
                raise

    def patch_workload(self, namespace: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch a Workload (spec.active: false, Kueue evicts it and admits it no more; true, it queues
        again; its podSets and queue, onto the version read; its finalizers). Gone with its job (404) or
        changed since (409): left to the next pass, which sees it."""
        deadline = self._gate.write()
        try:
            meta = {k: v for k, v in patch["metadata"].items() if k != "name"}
            name = patch["metadata"]["name"]
            body = {k: v for k, v in patch.items() if k != "metadata"} | ({"metadata": meta} if meta else {})
            custom().patch_namespaced_custom_object(
                kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name, body, **deadline
            )
        except client.ApiException as err:
            if err.status not in (404, 409):
                raise

    def patch_workload_status(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Merge-patch a Workload's status onto the version the pass decided on; a newer or a gone Workload
        (409, 404) is left to the next pass, which sees it."""
        deadline = self._gate.write()
        try:
            name = body["metadata"]["name"]
            custom().patch_namespaced_custom_object_status(
                kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name, dict(body), **deadline
            )
        except client.ApiException as err:
            if err.status not in (404, 409):
                raise

    def patch_status(self, job: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any] | None:
        """Write the status the pass decided (the whole of it: what it lacks is removed), only onto the
        version of the job it decided on: the job as written, or None when it changed since (409): nothing
        was written, and the pass must decide again."""
        meta = job["metadata"]
        body = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": status_patch(job.get("status"), status),
        }
        return self._patch_job(job, body, custom().patch_namespaced_custom_object_status)

    def drop_finalizer(self, job: Mapping[str, Any], finalizer: str) -> None:
        """Remove one finalizer from the job (its resourceVersion as the guard: a conflict is retried by the
        next pass, which sees the newer job)."""
        meta = job["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != finalizer]
        patch = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
        deadline = self._gate.write()
        try:
            custom().patch_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], patch, **deadline
            )
        except client.ApiException as err:
            if err.status not in (404, 409):
                raise

    def label_job(self, job: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any] | None:
        """Add labels to the job, onto the version of it the pass decided on: the job as written, or None
        when it changed since (409: the next pass decides again)."""
        body = {"metadata": {"labels": dict(labels), "resourceVersion": job["metadata"]["resourceVersion"]}}
        return self._patch_job(job, body, custom().patch_namespaced_custom_object)

    def _patch_job(
        self, job: Mapping[str, Any], body: Mapping[str, Any], patch: Callable[..., Any]
    ) -> dict[str, Any] | None:
        """A guarded merge patch of the job (`patch`: of the object or of its status): the job as written, or
        None on a conflict (409); JobGone when it is deleted."""
        meta = job["metadata"]
        deadline = self._gate.write()
        try:
            written = patch(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], dict(body), **deadline)
        except client.ApiException as err:
            if err.status == 409:
                return None
            if err.status == 404:
                raise JobGone from None
            raise
        return cast(dict[str, Any], written)

    def delete_job(self, namespace: str, name: str, uid: str) -> None:
        deadline = self._gate.write()
        try:
            custom().delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name,
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid), propagation_policy="Background"),
                **deadline,
            )  # fmt: skip
        except client.ApiException as err:
            if err.status not in (404, 409):
                raise

    def create_pods(self, pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Create a gang's pods through the shared creators, CREATES_QUEUED_A_PASS at a time; the pods created
        (not those that existed). The first failure is raised once the creates under way have ended."""
        queued: deque[Future[dict[str, Any] | None]] = deque()
        created: list[dict[str, Any] | None] = []
        try:
            for pod in pods:
                if len(queued) == CREATES_QUEUED_A_PASS:
                    created.append(queued.popleft().result())
                queued.append(self._creators.submit(self.create_pod, pod))
            created.extend(future.result() for future in list(queued))
        finally:
            wait(queued)
        return [pod for pod in created if pod is not None]

    def execute(
        self, job: Mapping[str, Any], plan: Plan, slot: threading.Semaphore | None = None
    ) -> Executed:
        """Carry out a plan in a safe order: create and mend first, then record the pass's decision in the
        status (guarded by the job's resourceVersion: a conflict leaves everything after it unwritten), and
        only then delete what the recorded decision no longer wants. An operator stopped between two writes
        leaves either pods the status does not claim yet (the next pass sees them and counts them) or a
        status whose deletes are still to come (the next pass derives them from it): never a member gone
        that no status accounts for, which the next leader would charge as a failure (record, then act:
        docs/architecture.md). `slot`, the pass slot the caller holds, is given up while the pods are
        created."""
        with self._gate.fault.pass_of(job, decides_deletes=bool(plan.delete) and plan.status is not None):
            return self._execute(job, plan, slot)

    def _execute(self, job: Mapping[str, Any], plan: Plan, slot: threading.Semaphore | None) -> Executed:
        meta = job["metadata"]
        namespace = meta["namespace"]
        done = Executed()
        if plan.job_labels:
            try:
                done.job = self.label_job(job, plan.job_labels)
            except JobGone:
                done.gone = True
            done.conflict = done.job is None and not done.gone
            return done
        for service in plan.apply:
            self.apply(service)
        if plan.workload is not None:
            self.create_workload(plan.workload)
        if plan.create:
            with _given_up(slot):
                done.created = self.create_pods(plan.create)
        for drifted in plan.relabel:
            self.relabel(namespace, drifted)
        if plan.workload_spec is not None:  # before the status: a resume is recorded once Kueue was told
            self.patch_workload(namespace, plan.workload_spec)
        if plan.status is not None:
            try:
                done.job = self.patch_status(job, plan.status)
            except JobGone:
                done.gone = True
                return done
            if done.job is None:
                done.conflict = True
                return done
        for op in plan.delete:
            self.delete(namespace, op)
        if plan.workload_status is not None:
            self.patch_workload_status(namespace, plan.workload_status)
        for event in plan.events:
            self._events.post(done.job or job, event)
        if plan.delete_job:
            self.delete_job(namespace, meta["name"], meta["uid"])
        return done


def _delete_workload(name: str, namespace: str, **options: Any) -> Any:
    """A Kueue Workload deleted as the core API's deletes are called (name, namespace)."""
    return custom().delete_namespaced_custom_object(
        kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name, **options
    )
