"""One pass, in a worker thread: decide on the World the runtime built from its caches (and what the core
asks to read first: its Needs, each read once), execute the plan, and on a conflict read the job once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from dtjob import metrics
from dtjob.core.observed import nodes_to_judge, pod_essentials
from dtjob.core.plan import Plan
from dtjob.core.reconcile import reconcile, refused_pods
from dtjob.core.world import Needs, World
from dtjob.kube.access import Kube
from dtjob.kube.refusals import Refused
from dtjob.kube.writer import Executed
from dtjob.runtime.legacy import LEGACY_FINALIZER, legacy

log = logging.getLogger(__name__)


# Reads before a decision: the inputs (the caches' gaps, networks, priority), once more where what was read
# changes what the pass lacks (a pod found changes what Kueue's word is read against), then a listing to
# confirm members gone.
MAX_READ_ROUNDS: Final = 3

PassOutcome = tuple[Plan, Executed, dict[str, Any] | None, list[dict[str, Any]]]


def run_pass(slot: threading.BoundedSemaphore, kube: Kube, world: World) -> PassOutcome:
    """`_pass_in_slot` once a pass slot is free (first come first served, as the threads wait)."""
    with slot:
        return _pass_in_slot(slot, kube, world)


def _pass_in_slot(slot: threading.BoundedSemaphore, kube: Kube, world: World) -> PassOutcome:
    """The blocking part, in a worker thread: decide, write, and on a conflict read the job once. Also
    returns those of the world's overdue pods (created, never delivered by the pod watch) that exist."""
    job, now = world.job, world.now
    if legacy(job):
        kube.write.drop_finalizer(job, LEGACY_FINALIZER)
    plan, read = _decided(kube, world)
    overdue = {pod["metadata"]["uid"] for pod in world.overdue}
    lagging = [dict(pod) for pod in read.children if pod["metadata"].get("uid") in overdue]
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


def _decided(kube: Kube, world: World) -> tuple[Plan, World]:
    """The core's plan, once it has read what it asked for, and the World it was decided on: the inputs it
    can tell it lacks before deciding come in one round (two, where what it read changes what it lacks), a
    confirmation listing (only a decision can ask for one) in the last."""
    outcome = reconcile(world)
    for _ in range(MAX_READ_ROUNDS):
        if not isinstance(outcome, Needs):
            return outcome, world
        world = _read(kube, world, outcome)
        outcome = reconcile(world)
    if isinstance(outcome, Needs):  # a core that asks again for what it was given would loop for good
        raise RuntimeError(f"the core still needs {outcome} after {MAX_READ_ROUNDS} rounds of reads")
    return outcome, world


def _read(kube: Kube, world: World, needs: Needs) -> World:
    """The world completed with what the core asked for, no longer the caches alone. Each is asked for
    once: the core asks only for what the world lacks, and each read fills it."""
    if needs.nodes or needs.overdue:
        world = _caught_up(kube, world, needs)
    if needs.networks:
        gke = replace(
            world.gke,
            networks=kube.read.read_networks(),
            device_classes=kube.read.read_device_classes(),
            dranet_accelerators=kube.read.read_dranet_accelerators(),
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
    return replace(world, from_caches=False)


def _caught_up(kube: Kube, world: World, needs: Needs) -> World:
    """The nodes the caches lacked, and the overdue pods that exist (after an outage the pod watch can
    reconnect seconds after the pass that created the gang) with their nodes, read."""
    lagging = [pod_essentials(pod) for pod in kube.read.read_pods(world.overdue)] if needs.overdue else []
    if lagging:
        meta = world.job["metadata"]
        log.warning("the pod watch has not delivered %d pod(s) of %s/%s that exist; counting them",
                    len(lagging), meta["namespace"], meta["name"])  # fmt: skip
    nodes = [*(world.nodes or ()), *kube.read.read_nodes(needs.nodes)]
    nodes += _unknown_nodes_of(kube, lagging, nodes)
    return replace(world, children=[*world.children, *lagging], nodes=nodes)
