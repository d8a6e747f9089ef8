"""Which network profile an attempt's pods get, and why; whether the cluster has what a profile needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from dtjob.api import GPU_ROLES, DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.gke.machines import AUTO_PROFILES, machine_gpus
from dtjob.core.gke.prerequisites import (
    DAEMON_PAIRINGS,
    DRANET_NODE_LABEL,
    PREREQUISITE_NAMESPACES,
    PREREQUISITES,
    DaemonPairing,
    Installer,
)
from dtjob.core.gke.profiles import (
    MANAGED_RDMA_DEVICE_CLASS,
    NETWORK_GROUP,
    PROFILES,
    profile_for,
)


@dataclass(frozen=True)
class NetworkChoice:
    """The profile an attempt's pods get, and why (status.nccl keeps both)."""

    profile: NcclProfileName
    reason: str
    degraded: bool = False
    """A Warning Event says so: TCP although the machines have a GPUDirect network, only for want of the
    cluster's Networks or installers, or of a daemon known to pair with its plugin (NCCL then runs 10-100x
    slower than it could), or a TCPX(O) daemon set that does not pair with the cluster's plugin."""
    autopilot: bool = False
    """The pods take the shape of GKE's Autopilot recipes (AUTOPILOT_PROFILES)."""
    daemon_image: str | None = None
    """The TCPX(O) daemon's image the pods run (with_daemon); None for profiles without a daemon."""


def _in_cluster_shape(
    choice: NetworkChoice, spec: DistributedTrainingJobSpec, autopilot: bool
) -> NetworkChoice:
    """The choice on an Autopilot cluster, for a profile that has an Autopilot shape there: said."""
    if not autopilot or profile_for(choice.profile, spec, True) == profile_for(choice.profile, spec):
        return choice
    reason = f"{choice.reason}; in Autopilot's shape (the pods run in GKE's Autopilot mode)"
    return replace(choice, reason=reason, autopilot=True)


def candidate(spec: DistributedTrainingJobSpec) -> NcclProfileName:
    """The profile the spec asks for: its own, or for Auto the one its accelerator type's machines have."""
    if spec.nccl.profile != NcclProfileName.AUTO:
        return spec.nccl.profile
    accelerator_type = spec.accelerator.type if spec.accelerator else ""
    return AUTO_PROFILES.get(accelerator_type, NcclProfileName.TCP)


def needs_networks(spec: DistributedTrainingJobSpec) -> bool:
    """Whether choosing needs to know which Network objects (and DRA DeviceClasses) the cluster has."""
    return spec.accelerator is not None and profile_for(candidate(spec), spec).gpu_nics


def gpu_pods(spec: DistributedTrainingJobSpec) -> int:
    return sum(spec.replica(role).count for role in spec.roles() if role in GPU_ROLES)


def choose(
    spec: DistributedTrainingJobSpec,
    cluster_networks: frozenset[str],
    daemonsets: frozenset[str] | None = None,
    device_classes: frozenset[str] = frozenset(),
    autopilot: bool = False,
    dranet_accelerators: frozenset[str] = frozenset(),
) -> NetworkChoice:
    """Auto's decision. GPUDirect only where it can work and helps: a GPUDirect machine type, all of its
    GPUs in each pod, more than one GPU pod (one pod's GPUs talk over NVLink), the Network objects its
    interfaces attach to present in the cluster (on RDMA machines without them: ManagedRDMA where the
    cluster has the DeviceClass of GKE's managed DRANET, among `device_classes`, and nodes of the job's
    accelerator type labelled as running its driver, `dranet_accelerators`), and its PREREQUISITES
    running (`daemonsets`: those the cluster runs, of PREREQUISITE_DAEMONSETS; None when they could not be
    read: not judged). Anything else is TCP, with the reason. An explicit profile is taken as it is
    (`missing_networks` and `missing_device_class` tell whether it can start). `autopilot`: the pods run
    in Autopilot mode (network.in_autopilot_mode), where they attach one more Network on RDMA machines."""
    wanted = candidate(spec)
    if spec.nccl.profile != NcclProfileName.AUTO:
        return _in_cluster_shape(NetworkChoice(wanted, f"spec.nccl.profile is {wanted}"), spec, autopilot)
    accelerator = spec.accelerator
    if accelerator is None:
        return NetworkChoice(NcclProfileName.TCP, "no accelerator: no GPU network to set up")
    if wanted == NcclProfileName.TCP:
        return NetworkChoice(NcclProfileName.TCP, f"{accelerator.type} machines have no GPUDirect network")
    fallback = f"TCP instead of {wanted} on {accelerator.type}"
    if (misfit := _gang_misfit(spec, accelerator.count)) is not None:
        return NetworkChoice(NcclProfileName.TCP, f"{fallback}: {misfit}")
    missing = missing_networks(spec, wanted, cluster_networks, autopilot)
    dranet = MANAGED_RDMA_DEVICE_CLASS in device_classes and accelerator.type in dranet_accelerators
    if missing and wanted == NcclProfileName.RDMA and dranet:
        wanted, missing = NcclProfileName.MANAGED_RDMA, ()
    lacking = (
        _lacking_networks(wanted, missing, accelerator.type)
        if missing
        else _lacking_daemonsets(wanted, daemonsets)
    )
    if lacking is not None:
        return NetworkChoice(NcclProfileName.TCP, f"{fallback}: {lacking} (see docs/gke.md)", degraded=True)
    profile = profile_for(wanted, spec, autopilot)
    nics = (
        f"their NICs claimed from GKE's managed DRANET (DeviceClass {profile.device_class})"
        if profile.device_class is not None
        else f"Networks {profile.networks[0]}..{profile.networks[-1]} present"
    )
    reason = f"{gpu_pods(spec)} pods of {machine_gpus(spec)} {accelerator.type} GPUs, {nics}"
    return _in_cluster_shape(NetworkChoice(wanted, reason), spec, autopilot)


def _gang_misfit(spec: DistributedTrainingJobSpec, pod_gpus: int) -> str | None:
    """Why GPUDirect would not help the gang (`pod_gpus`: each pod's), if it would not."""
    gpus = machine_gpus(spec)
    if pod_gpus != gpus:
        return (
            f"each pod asks for {pod_gpus} GPUs, GPUDirect needs the whole machine "
            f"({gpus}, accelerator.count)"
        )
    if (pods := gpu_pods(spec)) < 2:
        return f"{pods} GPU pod, whose GPUs talk over NVLink without a network"
    return None


def _lacking_networks(wanted: NcclProfileName, missing: tuple[str, ...], accelerator_type: str) -> str:
    """The Network objects the profile's interfaces attach to that the cluster lacks, said."""
    dranet = (
        f" nor GKE's managed DRANET (the DeviceClass {MANAGED_RDMA_DEVICE_CLASS} and {accelerator_type} "
        f"nodes labelled {DRANET_NODE_LABEL}=true)"
        if wanted == NcclProfileName.RDMA
        else ""
    )
    return (
        f"the cluster lacks the Network objects ({NETWORK_GROUP}) {', '.join(missing)} "
        f"that its interfaces attach to{dranet}"
    )


def _lacking_daemonsets(wanted: NcclProfileName, daemonsets: frozenset[str] | None) -> str | None:
    """The profile's PREREQUISITES the cluster does not run, said; None when it runs them all or when
    `daemonsets` could not be read."""
    if daemonsets is None or not (absent := [n for n in PREREQUISITES[wanted] if n not in daemonsets]):
        return None
    said = ", ".join(f"{name} ({PREREQUISITES[wanted][name]})" for name in absent)
    return (
        f"the cluster runs no DaemonSet {said} in {', '.join(PREREQUISITE_NAMESPACES)}, "
        "which GKE's GPUDirect guides install"
    )


def with_daemon(
    spec: DistributedTrainingJobSpec,
    chosen: NetworkChoice,
    explicit: str | None,
    installers: Mapping[str, Installer] | None,
) -> NetworkChoice:
    """The choice with the TCPX(O) daemon its pods run (other profiles have none). `explicit`, the daemon
    set (spec.nccl.daemonImage, else the operator's nccl.daemonImages), is taken as set: said when it does
    not pair with the NCCL plugin the cluster's installer DaemonSet installs (`installers`: by DaemonSet
    name). Otherwise the daemon is that plugin's pair (DAEMON_PAIRINGS), the profile's own when the
    plugin is not seen. A plugin the pairs do not list has no daemon known to work with it: Auto falls
    back to TCP, an explicit profile keeps the profile's daemon; both name the versions in a Warning."""
    if (pairing := DAEMON_PAIRINGS.get(chosen.profile)) is None:
        return chosen
    default = str(PROFILES[chosen.profile].sidecars[0]["image"])
    plugin = _installed_plugin(pairing, installers or {})
    paired = pairing.daemon_for_plugin.get(plugin) if plugin is not None else None
    if explicit is not None:
        if plugin is None or paired is None or name_and_tag(explicit)[1] == paired:
            return replace(chosen, daemon_image=explicit)
        mismatch = (
            f"the daemon {explicit} does not pair with the NCCL plugin {plugin} that the cluster's "
            f"{pairing.installer} installs: that plugin pairs with daemon {paired} ({pairing.release_notes}); "
            f"set spec.nccl.daemonImage, or the chart's {pairing.chart_value}, to the daemon of that tag "
            "(docs/gke.md)"
        )
        return replace(
            chosen, reason=f"{chosen.reason}; but {mismatch}", degraded=True, daemon_image=explicit
        )
    if plugin is None:
        return replace(chosen, daemon_image=default)
    if paired is not None:
        image = f"{default.rsplit(':', 1)[0]}:{paired}"
        if image == default:
            return replace(chosen, daemon_image=image)
        said = f"daemon {paired}, the pair of the NCCL plugin {plugin} that the cluster's {pairing.installer} installs"
        return replace(chosen, reason=f"{chosen.reason}; {said}", daemon_image=image)
    unknown = (
        f"the cluster's {pairing.installer} installs the NCCL plugin {plugin}, which {pairing.release_notes} "
        f"as dtjob knows them do not list ({', '.join(pairing.daemon_for_plugin)}): no daemon is known to "
        f"pair with it; set spec.nccl.daemonImage, or the chart's {pairing.chart_value}, to the daemon of "
        "its release (docs/gke.md)"
    )
    if spec.nccl.profile == NcclProfileName.AUTO:
        accelerator_type = spec.accelerator.type if spec.accelerator else ""
        return NetworkChoice(
            NcclProfileName.TCP,
            f"TCP instead of {chosen.profile} on {accelerator_type}: {unknown}",
            degraded=True,
        )
    return replace(chosen, reason=f"{chosen.reason}; but {unknown}", degraded=True, daemon_image=default)


def _installed_plugin(pairing: DaemonPairing, installers: Mapping[str, Installer]) -> str | None:
    """The version of the NCCL plugin the profile's installer DaemonSet installs; None when the cluster
    runs no such installer (or it was not read), or its images name no plugin."""
    installer = installers.get(pairing.installer)
    images = installer.images if installer is not None else ()
    return next((tag for image, tag in map(name_and_tag, images) if image == pairing.plugin_image), None)


def name_and_tag(image: str) -> tuple[str, str]:
    """An image reference's last path segment and its tag ("" without one), any digest dropped."""
    name, _, tag = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")
    return name, tag


def missing_networks(
    spec: DistributedTrainingJobSpec,
    name: NcclProfileName,
    cluster_networks: frozenset[str],
    autopilot: bool = False,
) -> tuple[str, ...]:
    return tuple(n for n in profile_for(name, spec, autopilot).networks if n not in cluster_networks)


def missing_device_class(name: NcclProfileName, device_classes: frozenset[str]) -> str | None:
    """The DeviceClass the profile claims NICs from, when the cluster lacks it."""
    wanted = PROFILES[name].device_class
    return wanted if wanted is not None and wanted not in device_classes else None
