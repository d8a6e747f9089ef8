"""One pass, in a worker thread: decide on what the caches hold (and what the core asks to read first: its
Needs, each read once), execute the plan, and on a conflict read the job once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from dtjob import metrics
from dtjob.core import progress
from dtjob.core.observed import nodes_to_judge, pod_essentials
from dtjob.core.plan import Plan
from dtjob.core.reconcile import reconcile, refused_pods
from dtjob.core.world import GkeFacts, KueueFacts, Needs, PassSettings, World
from dtjob.kube.access import Kube
from dtjob.kube.refusals import Refused
from dtjob.kube.writer import Executed
from dtjob.runtime.legacy import LEGACY_FINALIZER, legacy
from dtjob.settings import OperatorSettings

log = logging.getLogger(__name__)


# Reads before a decision: the inputs (networks, priority), then a listing to confirm members gone.
MAX_READ_ROUNDS: Final = 2

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
    queue: KueueFacts,
    gke: GkeFacts,
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
    settings = PassSettings(
        config.daemon_images, config.progress_url if config.progress_port is not None else None
    )
    plan = _decided(kube, World(job, children, now, nodes, gke, queue, ledger, settings))
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
    kube: Kube, pods: Sequence[Mapping[str, Any]], known: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    names = {node["metadata"]["name"] for node in known}
    return kube.read.read_nodes(name for name in nodes_to_judge(pods) if name not in names)


def _decided(kube: Kube, world: World) -> Plan:
    """The core's plan, once it has read what it asked for: the inputs it can tell it lacks before deciding
    come in one round, a confirmation listing (only a decision can ask for one) in the next."""
    outcome = reconcile(world)
    for _ in range(MAX_READ_ROUNDS):
        if not isinstance(outcome, Needs):
            return outcome
        world = _read(kube, world, outcome)
        outcome = reconcile(world)
    if isinstance(outcome, Needs):  # a core that asks again for what it was given would loop for good
        raise RuntimeError(f"the core still needs {outcome} after {MAX_READ_ROUNDS} rounds of reads")
    return outcome


def _read(kube: Kube, world: World, needs: Needs) -> World:
    """The world completed with what the core asked for. Each is asked for once: the core asks only for
    what the world lacks, and each read fills it."""
    if needs.networks:
        gke = replace(
            world.gke,
            networks=kube.read.read_networks(),
            device_classes=kube.read.read_device_classes(),
            installers=kube.read.read_gpudirect_daemonsets(),
        )
        world = replace(world, gke=gke)
    if needs.priority is not None:
        world = replace(world, kueue=replace(world.kueue, priority=kube.read.read_priority(needs.priority)))
    if needs.listing:  # the cache says members are gone: a listing of the job's pods says for sure
        listed = [pod_essentials(pod) for pod in kube.read.list_job_pods(world.job)]
        children = [child for child in world.children if child.get("kind") != "Pod"] + listed
        nodes = [*(world.nodes or ()), *_unknown_nodes_of(kube, listed, world.nodes or ())]
        world = replace(world, children=children, nodes=nodes, listed=True)
    return world
