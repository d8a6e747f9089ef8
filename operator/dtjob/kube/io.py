"""Read a job and its children; server-side apply, delete with preconditions, patch status, post events.

All calls are blocking (the official client); the Kopf adapter runs them in a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client

from dtjob.api import GROUP, KIND, PLURAL, VERSION
from dtjob.kube.client import api_client, core, custom
from dtjob.names import JOB_NAME_LABEL
from dtjob.plan import Delete, Event, Plan

FIELD_MANAGER = "dtjob-operator"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"

log = logging.getLogger(__name__)


def read_job(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        job = cast(
            dict[str, Any], custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        )
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return job


def read_children(namespace: str, job_name: str, job_uid: str) -> list[dict[str, Any]]:
    """Pods and the Service labelled with the job's name and owned by this very job (not a namesake)."""
    selector = f"{JOB_NAME_LABEL}={job_name}"
    api = core()
    sanitize = api_client().sanitize_for_serialization
    pods = api.list_namespaced_pod(namespace, label_selector=selector).items
    services = api.list_namespaced_service(namespace, label_selector=selector).items
    children = [sanitize(obj) for obj in [*services, *pods]]
    for child, kind in zip(children, ["Service"] * len(services) + ["Pod"] * len(pods), strict=True):
        child.setdefault("apiVersion", "v1")
        child.setdefault("kind", kind)
    return [c for c in children if _owned_by(c, job_uid)]


def read_nodes(names: Iterable[str]) -> list[dict[str, Any]]:
    """The named nodes, one GET each; a node that is gone is simply absent.

    GETs and not one LIST: the cost follows the gang (a node per pod at most), not the cluster, whose
    thousands of nodes with their image lists would be read on every pass of every job. Read after the
    pods, so an absent node of a bound pod was deleted, not yet unknown.
    """
    api, sanitize = core(), api_client().sanitize_for_serialization
    nodes = []
    for name in names:
        try:
            nodes.append(cast(dict[str, Any], sanitize(api.read_node(name))))
        except client.ApiException as err:
            if err.status != 404:
                raise
    return nodes


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


def apply(obj: Mapping[str, Any]) -> None:
    """Server-side apply under one field manager, forcing ownership so edited children drift back."""
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    api = core()
    kind = obj["kind"]
    patch = {"Pod": api.patch_namespaced_pod, "Service": api.patch_namespaced_service}[kind]
    try:
        patch(
            name,
            namespace,
            dict(obj),
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY_CONTENT_TYPE,
        )
    except client.ApiException as err:
        # 409 with force: the uid the plan pinned names an object that is gone; the next pass sees why.
        if not (err.status == 409 and obj["metadata"].get("uid")):
            raise


def delete(namespace: str, op: Delete) -> None:
    """Delete only the object we decided about (uid precondition); gone already is fine."""
    api = core()
    remove = {"Pod": api.delete_namespaced_pod, "Service": api.delete_namespaced_service}[op.kind]
    body = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(uid=op.uid) if op.uid else None,
        grace_period_seconds=op.grace_period_seconds,
        propagation_policy="Background",
    )
    try:
        remove(op.name, namespace, body=body)
    except client.ApiException as err:
        if err.status not in (404, 409):  # 409: the uid precondition failed, a new object took the name
            raise


def patch_status(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    custom().patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": status}
    )


def delete_job(namespace: str, name: str, uid: str) -> None:
    try:
        custom().delete_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid), propagation_policy="Background"),
        )  # fmt: skip
    except client.ApiException as err:
        if err.status not in (404, 409):
            raise


def post_event(job: Mapping[str, Any], event: Event) -> None:
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
    try:
        core().create_namespaced_event(meta["namespace"], body)
    except client.ApiException as err:  # events are best effort: never fail a reconcile over one
        log.warning(
            "could not post event %s on %s/%s: %s", event.reason, meta["namespace"], meta["name"], err.reason
        )


def execute(job: Mapping[str, Any], plan: Plan) -> None:
    """Carry out a plan in a safe order: delete stale children first, then apply, then record the outcome."""
    meta = job["metadata"]
    namespace = meta["namespace"]
    for op in plan.delete:
        delete(namespace, op)
    for obj in plan.apply:
        apply(obj)
    if plan.status is not None:
        patch_status(namespace, meta["name"], plan.status)
    for event in plan.events:
        post_event(job, event)
    if plan.delete_job:
        delete_job(namespace, meta["name"], meta["uid"])


def children_of(namespace: str, job: Mapping[str, Any]) -> Sequence[dict[str, Any]]:
    return read_children(namespace, job["metadata"]["name"], job["metadata"]["uid"])
