"""A pass's network step: the NCCL profile of the attempt's GPU pods, chosen once an attempt (and kept in
status.nccl), or the one recorded for it; a job Invalid for now when the explicit profile it names cannot
start on this cluster, or when Auto would fall back to TCP under networkFallback Never. A pass asks it all
at once (`of_pass`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from dtjob.api import DistributedTrainingJobSpec, JobStatus, NcclChoice, NcclProfileName, NetworkFallback
from dtjob.core.gke import (
    NETWORK_GROUP,
    NetworkChoice,
    choose,
    missing_device_class,
    missing_networks,
    needs_networks,
    on_autopilot,
    selects_autopilot,
    with_daemon,
)
from dtjob.core.world import GkeFacts

# How soon a job Invalid for want of an object an admin may still create (its profile's Network objects,
# the priority class it names) looks for it again.
RECHECK_SECONDS: Final = 30.0


@dataclass(frozen=True)
class AttemptNetwork:
    """The attempt's network: the profile its pods render with, and the choice made in this pass (None
    when it was made before, or none is made: CPU pods, an explicit TCP)."""

    profile: NcclProfileName | None
    autopilot: bool
    chosen: NetworkChoice | None
    daemon_image: str | None = None
    """The TCPX(O) daemon's image its pods run: as recorded with the choice, or as set (the spec's, the
    operator's) for a choice recorded without one; None: the profile's."""


@dataclass(frozen=True)
class PassNetwork:
    """What a pass asks of the network, answered at once."""

    unread: bool
    """The choice still to be made needs the cluster's GKE facts, unread (Needs.networks)."""
    attempt: AttemptNetwork | str
    """The attempt's network, or why the explicit profile cannot start here (the job Invalid for now)."""
    autopilot: bool
    """The pods run in GKE's Autopilot mode: as recorded with the attempt's network, or as the cluster
    and the templates say (in_autopilot_mode)."""
    chosen: NetworkChoice | None
    """The choice made in this pass (with its daemon: gke.with_daemon); None when it was made before, or
    none is made."""


def of_pass(
    spec: DistributedTrainingJobSpec,
    old: JobStatus,
    gke: GkeFacts,
    daemon_images: Mapping[NcclProfileName, str] | None,
) -> PassNetwork:
    """The pass's network. `daemon_images`: the operator's GPUDirect daemon images by profile (the
    chart's nccl.daemonImages; spec.nccl.daemonImage wins)."""
    unread, attempt = needs_gke_facts(spec, old, gke), attempt_network(spec, old, gke, daemon_images)
    if isinstance(attempt, str):
        return PassNetwork(unread, attempt, False, None)
    autopilot = attempt.autopilot or in_autopilot_mode(spec, gke)
    return PassNetwork(unread, attempt, autopilot, attempt.chosen)


def chooses_network(spec: DistributedTrainingJobSpec) -> bool:
    """Whether the job's GPU pods get a network chosen for each attempt (kept in status.nccl): Auto, or
    an explicit profile whose Network objects must exist. Not for CPU jobs or an explicit TCP."""
    return spec.accelerator is not None and (
        spec.nccl.profile == NcclProfileName.AUTO or needs_networks(spec)
    )


def recorded(old: JobStatus) -> NcclChoice | None:
    """The choice status.nccl holds for the current attempt."""
    return old.nccl if old.nccl is not None and old.nccl.attempt == old.attempt else None


def needs_gke_facts(spec: DistributedTrainingJobSpec, old: JobStatus, gke: GkeFacts) -> bool:
    """Whether the choice is still to be made for this attempt and needs the Network objects, unread."""
    return chooses_network(spec) and recorded(old) is None and gke.networks is None and needs_networks(spec)


def attempt_network(
    spec: DistributedTrainingJobSpec,
    old: JobStatus,
    gke: GkeFacts,
    daemon_images: Mapping[NcclProfileName, str] | None = None,
) -> AttemptNetwork | str:
    """The attempt's network; or why the explicit profile cannot start here, or Auto would fall back to
    TCP under networkFallback Never (the job is Invalid until an admin creates what it lacks)."""
    before = recorded(old)
    if not chooses_network(spec):
        return AttemptNetwork(None, bool(before and before.autopilot), None)
    if before is not None:
        daemon = before.daemon_image or _daemon_set(spec, before.profile, daemon_images)
        return AttemptNetwork(before.profile, bool(before.autopilot), None, daemon)
    classes = gke.device_classes or frozenset()
    running = frozenset(gke.installers) if gke.installers is not None else None
    networks = gke.networks or frozenset()
    dranet = gke.dranet_accelerators or frozenset()
    chosen = choose(spec, networks, running, classes, in_autopilot_mode(spec, gke), dranet)
    if (missing := _networks_missing(spec, chosen, networks, classes)) is not None:
        return missing
    chosen = with_daemon(spec, chosen, _daemon_set(spec, chosen.profile, daemon_images), gke.installers)
    if (
        chosen.degraded
        and chosen.profile == NcclProfileName.TCP
        and spec.nccl.network_fallback == NetworkFallback.NEVER
    ):
        return (
            f"spec.nccl.networkFallback is Never, and profile Auto would fall back: {chosen.reason}. "
            f"This job looks again every {RECHECK_SECONDS:.0f}s; or set networkFallback TCP"
        )
    return AttemptNetwork(chosen.profile, chosen.autopilot, chosen, chosen.daemon_image)


def _daemon_set(
    spec: DistributedTrainingJobSpec,
    profile: NcclProfileName,
    daemon_images: Mapping[NcclProfileName, str] | None,
) -> str | None:
    """The GPUDirect daemon image set for the profile: the job's, else the operator's; None: none set."""
    return spec.nccl.daemon_image or (daemon_images or {}).get(profile)


def in_autopilot_mode(spec: DistributedTrainingJobSpec, gke: GkeFacts) -> bool:
    """Whether the job's pods run in GKE's Autopilot mode: on an Autopilot cluster (its nodes say so, or
    its GPUDirect installers run in Autopilot's namespaces), or where their template selects an Autopilot
    ComputeClass (gke.autopilot)."""
    templates = (spec.replica(role).template.get("spec") or {} for role in spec.roles())
    return gke.autopilot or on_autopilot(gke.installers) or any(map(selects_autopilot, templates))


def _networks_missing(
    spec: DistributedTrainingJobSpec,
    chosen: NetworkChoice,
    networks: frozenset[str],
    device_classes: frozenset[str],
) -> str | None:
    """Why an explicit profile cannot start here: the cluster lacks its Network objects, or the DeviceClass
    it claims NICs from (Auto falls back)."""
    if spec.nccl.profile == NcclProfileName.AUTO:
        return None
    if (device_class := missing_device_class(chosen.profile, device_classes)) is not None:
        return (
            f"spec.nccl.profile: {chosen.profile} claims each pod's GPU NICs from the DRA DeviceClass "
            f"{device_class}, which this cluster lacks: GKE installs it on clusters with managed DRANET "
            f"(docs/gke.md; this job looks again every {RECHECK_SECONDS:.0f}s). Use profile RDMA with "
            "the rdma-N Network objects, or Auto"
        )
    missing = missing_networks(spec, chosen.profile, networks, chosen.autopilot)
    if not missing:
        return None
    return (
        f"spec.nccl.profile: {chosen.profile} attaches each pod to the GKE Network objects "
        f"({NETWORK_GROUP}/v1) {', '.join(missing)}, which this cluster lacks. An admin creates them "
        f"(docs/gke.md; this job looks again every {RECHECK_SECONDS:.0f}s); or use profile Auto, "
        "which falls back to TCP without them"
    )
