"""One pass, in a worker thread: decide on what the caches hold (and what the plan asks to read first),
execute the plan, and on a conflict read the job once."""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dtjob import metrics
from dtjob.core import progress
from dtjob.core.observed import nodes_to_judge, pod_essentials
from dtjob.core.plan import Plan, reconcile, refused_pods
from dtjob.kube.access import Kube
from dtjob.kube.refusals import Refused
from dtjob.kube.writer import Executed
from dtjob.runtime.legacy import LEGACY_FINALIZER, legacy
from dtjob.settings import OperatorSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Queue:
    """What a pass needs of Kueue: the job's Workload and the ResourceFlavors, as read."""

    workload: dict[str, Any] | None
    flavors: dict[str, dict[str, Any]]
    served: bool
    routes: dict[str, str]
    """The ClusterQueue of each LocalQueue in the job's namespace."""


PassOutcome = tuple[Plan, Executed, dict[str, Any] | None, list[dict[str, Any]]]


def run_pass(slot: threading.BoundedSemaphore, *args: Any) -> PassOutcome:
    """`_pass_in_slot` once a pass slot is free (first come first served, as the threads wait)."""
    with slot:
        return _pass_in_slot(slot, *args)


def _pass_in_slot(
    slot: threading.BoundedSemaphore,
    kube: Kube,
    job: dict[str, Any],
    children: list[dict[str, Any]],
    overdue: list[dict[str, Any]],
    cached_nodes: list[dict[str, Any]],
    unknown_nodes: list[str],
    now: datetime,
    config: OperatorSettings,
    queue: Queue,
    ledger: progress.Ledger | None,
) -> PassOutcome:
    """The blocking part, in a worker thread: decide, write, and on a conflict read the job once. Also
    returns those of the `overdue` pods (created, never delivered by the pod watch) that still exist."""
    if legacy(job):
        kube.write.drop_finalizer(job, LEGACY_FINALIZER)
    # A node the cache lacks may be new (its watch lags the pods'): ask before judging it deleted.
    nodes = cached_nodes + kube.read.read_nodes(unknown_nodes)
    # Likewise a pod this operator created that its watch never delivered: after an outage the pod watch
    # can reconnect seconds after the pass that created the gang. Ask before taking the pod for lost.
    lagging = [pod_essentials(pod) for pod in kube.read.read_pods(overdue)]
    if lagging:
        log.warning("the pod watch has not delivered %d pod(s) of %s/%s that exist; counting them",
                    len(lagging), job["metadata"]["namespace"], job["metadata"]["name"])  # fmt: skip
    children = children + lagging
    nodes += _unknown_nodes_of(kube, lagging, nodes)
    decide = functools.partial(
        reconcile, daemon_images=config.daemon_images, workload=queue.workload, flavors=queue.flavors,
        kueue_served=queue.served, routes=queue.routes if queue.served else None, ledger=ledger,
        progress_url=config.progress_url if config.progress_port is not None else None,
    )  # fmt: skip
    read: dict[str, Any] = {}  # what a plan asked the pass to read first, once each
    plan = decide(job, children, now, nodes)
    if plan.confirm_missing:  # the cache says members are gone: a listing of the job's pods says for sure
        listed = [pod_essentials(pod) for pod in kube.read.list_job_pods(job)]
        children = [child for child in children if child.get("kind") != "Pod"] + listed
        nodes += _unknown_nodes_of(kube, listed, nodes)
        plan = decide(job, children, now, nodes)
    while True:
        if plan.read_networks and "networks" not in read:  # once an attempt, for a profile needing them
            read["networks"] = kube.read.read_networks()
            read["installers"] = kube.read.read_gpudirect_daemonsets()
            read["device_classes"] = kube.read.read_device_classes()
        elif plan.read_priority is not None and "priority" not in read:  # once, for a queued job's Workload
            read["priority"] = kube.read.read_priority(plan.read_priority)
        else:
            break
        plan = decide(job, children, now, nodes, **read)
    try:
        done = kube.write.execute(job, plan, slot)
    except Refused as refused:  # the spec cannot work: say so on the job instead of retrying
        plan = refused_pods(job, str(refused), now)
        done = kube.write.execute(job, plan)
    if done.conflict:
        return plan, done, kube.read.read_job(job["metadata"]["namespace"], job["metadata"]["name"]), lagging
    metrics.record_pass(job, plan.status, now)
    return plan, done, None, lagging


def _unknown_nodes_of(
    kube: Kube, pods: list[dict[str, Any]], known: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    names = {node["metadata"]["name"] for node in known}
    return kube.read.read_nodes(name for name in nodes_to_judge(pods) if name not in names)
