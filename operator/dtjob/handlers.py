"""The only Kopf adapter: one long-lived loop per job, woken by its pods, their nodes and its own changes.

Level-triggered: every pass reads the job, its children and their nodes afresh, calls the pure
`reconcile`, and executes the resulting Plan. Pod, node and job events only wake the job's loop early;
a periodic resync covers anything missed (a lost watch event, an operator restart). All state that
must survive a restart (the attempt, restart counters) lives in the job's status, never in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from dtjob import metrics
from dtjob.api import GROUP, PLURAL, VERSION
from dtjob.kube import io
from dtjob.names import JOB_NAME_LABEL
from dtjob.observed import nodes_to_judge
from dtjob.plan import reconcile

RESYNC_SECONDS = 30.0
# Requeue soon after a failed pass (API hiccup) instead of waiting for the resync.
ERROR_RETRY_SECONDS = 5.0

log = logging.getLogger(__name__)
JobKey = tuple[str, str]


def _wakeups(memo: kopf.Memo) -> dict[JobKey, asyncio.Event]:
    wakeups: dict[JobKey, asyncio.Event] = memo["wakeups"]
    return wakeups


def _wake(memo: kopf.Memo, namespace: str | None, name: str | None) -> None:
    if namespace and name and (event := _wakeups(memo).get((namespace, name))):
        event.set()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Each object's memo is a shallow copy of this operator-wide one: created here, the one registry of
    # wake-up events is shared by the pods' handlers and the jobs' loops (created later, each object
    # would get a registry of its own, and a pod's change would never wake its job).
    memo["wakeups"] = {}
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    # Idle watches can silently stop delivering events (nolar/kopf#698): reconnect regularly.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    # Our own Events say what happened; Kopf's per-handler events would only be noise.
    settings.posting.enabled = False
    if port := os.environ.get("DTJOB_METRICS_PORT"):
        metrics.serve(int(port))


@kopf.on.event("pods", labels={JOB_NAME_LABEL: kopf.PRESENT})
def pod_changed(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    _wake(memo, namespace, labels.get(JOB_NAME_LABEL))


@kopf.index("pods", labels={JOB_NAME_LABEL: kopf.PRESENT})
def jobs_by_node(
    namespace: str | None, spec: kopf.Spec, labels: kopf.Labels, **_: Any
) -> dict[str, JobKey] | None:
    """The job of every bound pod, by node: what a node's trouble must wake."""
    node = spec.get("nodeName")
    return {node: (namespace, labels[JOB_NAME_LABEL])} if node and namespace else None


@kopf.on.event("nodes")
def node_changed(type: str, name: str, status: kopf.Status, memo: kopf.Memo, **kwargs: Any) -> None:
    """A node deleted or not Ready changes nothing on its pods for a while (the pod GC waits 40 s, the
    taint manager 300 s): wake the jobs on it, whose passes judge the node themselves."""
    jobs_by_node: kopf.Index[str, JobKey] = kwargs["jobs_by_node"]  # Kopf passes indexes by name
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    if type == "DELETED" or not ready:
        for namespace, job in set(jobs_by_node.get(name, [])):
            _wake(memo, namespace, job)


@kopf.on.event(GROUP, VERSION, PLURAL)
def job_changed(namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any) -> None:
    _wake(memo, namespace, name)


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
async def run_job(
    name: str, namespace: str | None, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    assert namespace is not None, "DistributedTrainingJob is namespaced"
    wakeup = _wakeups(memo).setdefault((namespace, name), asyncio.Event())
    try:
        while not stopped:
            wakeup.clear()
            delay = await reconcile_once(namespace, name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout=delay)
    finally:
        _wakeups(memo).pop((namespace, name), None)
        metrics.JOB_PHASES.forget(namespace, name)


async def reconcile_once(namespace: str, name: str) -> float:
    """One pass; returns how long to wait before the next unless something wakes the loop earlier."""
    start = time.monotonic()
    try:
        return await asyncio.to_thread(_reconcile_blocking, namespace, name)
    except Exception:  # a failed pass must not kill the job's loop; the next one starts afresh
        metrics.RECONCILE_ERRORS.inc()
        log.exception("reconcile of %s/%s failed; retrying in %ss", namespace, name, ERROR_RETRY_SECONDS)
        return ERROR_RETRY_SECONDS
    finally:
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - start)


def _reconcile_blocking(namespace: str, name: str) -> float:
    job = io.read_job(namespace, name)
    if job is None or job["metadata"].get("deletionTimestamp"):
        return RESYNC_SECONDS
    now = datetime.now(UTC)
    children = io.children_of(namespace, job)
    plan = reconcile(job, children, now, io.read_nodes(nodes_to_judge(children)))
    io.execute(job, plan)
    metrics.record_pass(job, plan.status, now)
    if plan.requeue_after is not None:
        return max(0.1, min(plan.requeue_after, RESYNC_SECONDS))
    return RESYNC_SECONDS
