"""What one pass reads (World) and what it must read before it can decide (Needs).

The runtime fills a World from its caches, in one place, and hands it to `reconcile`. What a pass reads
only now and then is left out until `reconcile` asks for it with a Needs: the nodes its pods are bound to
that the node cache lacks and whether the pods this operator created that the pod watch has not delivered
exist (a watch behind the other must not pass for a node deleted or a member lost), the cluster's
GPUDirect facts (once an attempt, for a network profile that needs them), the priority class a queued
job's Workload carries (once, when the Workload is created), and a fresh listing of the job's pods (when a
decision would take members for lost or give their ranks to spares: a cache that lags must not charge a
failure). The runtime reads all of it, once each, and calls `reconcile` again with the World it completed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dtjob.api import NcclProfileName
from dtjob.core.gke import Installer
from dtjob.core.kueue_priority import Priority
from dtjob.core.progress import Ledger


@dataclass(frozen=True)
class GkeFacts:
    """The cluster's GKE facts, as read: its GPUDirect objects, and whether it is an Autopilot cluster."""

    networks: frozenset[str] | None = None
    """The names of the cluster's GKE Network objects; None: not read (a profile that needs them asks)."""
    device_classes: frozenset[str] | None = None
    """The names of its DRA DeviceClasses, read with the networks."""
    installers: Mapping[str, Installer] | None = None
    """The GPUDirect prerequisite DaemonSets it runs (where, their images); None: unknown, not judged."""
    autopilot: bool = False
    """The cluster is an Autopilot cluster, as its nodes tell (gke.autopilot_cluster over the operator's
    node cache, every pass): its pods run in Autopilot mode."""
    dranet_accelerators: frozenset[str] | None = None
    """The accelerator types of the nodes GKE labels as running its managed DRANET driver
    (gke.DRANET_NODE_LABEL), read with the networks."""


@dataclass(frozen=True)
class KueueFacts:
    """For a job in a Kueue queue: its Workload and what Kueue's objects say around it."""

    workload: Mapping[str, Any] | None = None
    flavors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Kueue's ResourceFlavors by name."""
    served: bool = True
    """Whether the operator reads Kueue's API (a queued job never runs around Kueue)."""
    routes: Mapping[str, str] | None = None
    """The ClusterQueue of each LocalQueue in the job's namespace, as read (see kueue.read)."""
    priority: Priority | None = None
    """The priority class the job names, once a pass asked for it (Needs.priority)."""


@dataclass(frozen=True)
class PassSettings:
    """The operator's settings a pass renders with."""

    daemon_images: Mapping[NcclProfileName, str] | None = None
    """The operator's GPUDirect daemon images by profile."""
    progress_url: str | None = None
    """Where the pods report their progress (the operator's intake); None when it has none."""


@dataclass(frozen=True)
class World:
    """Everything one pass reads."""

    job: Mapping[str, Any]
    children: Sequence[Mapping[str, Any]]
    """The pods, Service and NetworkPolicy the job owns."""
    now: datetime
    nodes: Sequence[Mapping[str, Any]] | None = None
    """The Node objects the children are bound to, read after them (see `observe`); without them no node
    is judged lost and no pod stuck."""
    gke: GkeFacts = GkeFacts()
    kueue: KueueFacts = KueueFacts()
    ledger: Ledger | None = None
    """The trainers' latest progress reports (see progress)."""
    settings: PassSettings = PassSettings()
    listed: bool = False
    """Whether the pods among the children come from a fresh listing, not a cache (Needs.listing)."""
    overdue: Sequence[Mapping[str, Any]] = ()
    """Pods this operator created that the pod watch has not delivered after a while (runtime/created.py),
    not among the children: whether they exist is asked (Needs.overdue) before a member counts as lost."""
    from_caches: bool = False
    """Whether the children and nodes are the operator's caches as they stand (the runtime's first World of
    a pass): a node they lack may be one the node watch has not delivered yet, so the pass asks for it
    (Needs.nodes) and for the overdue pods before it judges anything. False once the runtime has read
    what was asked, and in a World built whole, where a node absent is a node gone."""


@dataclass(frozen=True)
class Needs:
    """What a pass must read before it decides; reconcile asks for what it can tell it lacks, all at once."""

    nodes: tuple[str, ...] = ()
    """Nodes the pods are bound to that the caches lack (World.from_caches): one still absent is gone."""
    overdue: bool = False
    """Whether the World's overdue pods exist: those that do join the children."""
    networks: bool = False
    """The cluster's GPUDirect facts (GkeFacts): the network profile is chosen once an attempt."""
    priority: Priority | None = None
    """The value of this priority class: the Workload to create carries it."""
    listing: tuple[str, ...] = ()
    """Members the decision takes for lost, or gives to a hot spare, because the children handed in lack
    them: a fresh listing of the job's pods confirms it first (only a decision can tell, so this one can
    follow the others in a second round)."""
