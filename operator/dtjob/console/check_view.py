"""What `dtjob check` prints: the cluster as dtjob reads it, the network its first attempt would get and
why, what it would be refused and by whom (the server's dry run), pod by pod. Pure: the facts in, lines out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dtjob.api import DistributedTrainingJobSpec
from dtjob.core.gke import Installer, name_and_tag, on_autopilot
from dtjob.core.plan import Event
from dtjob.core.world import GkeFacts


@dataclass(frozen=True)
class DryRun:
    """One object of the first pass, sent with dryRun=All: refused (the apiserver's message) or not."""

    kind: str
    name: str
    role: str | None
    refused: str | None


def report(
    job: Mapping[str, Any],
    gke: GkeFacts,
    status: Mapping[str, Any] | None,
    events: Sequence[Event],
    sent: Sequence[DryRun],
) -> list[str]:
    """The lines of the report. `status`, `events`: the first pass's; `sent`: its objects, dry-run."""
    spec = DistributedTrainingJobSpec.model_validate(job["spec"])
    meta = job["metadata"]
    roles = ", ".join(f"{spec.replica(r).count} {r}" for r in spec.roles())
    gpus = f", {spec.accelerator.count} x {spec.accelerator.type} a pod" if spec.accelerator else ""
    lines = [f"Job {meta['namespace']}/{meta['name']}: {spec.framework}, {roles}{gpus}", *_cluster(gke)]
    status = status or {}
    if (nccl := status.get("nccl")) is not None:
        lines.append(f"Network: {nccl['profile']}: {nccl['reason']}")
        if daemon := nccl.get("daemonImage"):
            lines.append(f"  daemon image: {daemon}")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Invalid" and condition.get("status") == "True":
            lines.append(f"Invalid: {condition.get('message', '')}")
    lines += [f"{e.type} {e.reason}: {e.message}" for e in events if e.type == "Warning"]
    lines.append("Server dry run (nothing is created):")
    lines += [_sent(one) for one in sent] or ["  nothing to send: the job would not start (see above)"]
    return lines


def _cluster(gke: GkeFacts) -> list[str]:
    if gke.autopilot:
        mode = "Autopilot (its nodes say so)"
    elif on_autopilot(gke.installers):
        mode = "Autopilot (its GPUDirect installers run in Autopilot's namespaces)"
    else:
        mode = "Standard (or not GKE)"
    installers = ", ".join(_installer(n, i) for n, i in sorted((gke.installers or {}).items())) or "none"
    return [
        f"Cluster: {mode}",
        f"  GPUDirect DaemonSets: {installers}",
        f"  Network objects: {_names(gke.networks)}",
        f"  DRA DeviceClasses: {_names(gke.device_classes)}",
        f"  nodes labelled as running GKE's DRANET driver, by accelerator: {_names(gke.dranet_accelerators)}",
    ]


def _installer(name: str, installer: Installer) -> str:
    tags = [
        tag for name, tag in map(name_and_tag, installer.images) if name.startswith("nccl-plugin") and tag
    ]
    return f"{name} ({installer.namespace}{', plugin ' + tags[0] if tags else ''})"


def _names(names: frozenset[str] | None) -> str:
    return ", ".join(sorted(names)) if names else "none"


def _sent(one: DryRun) -> str:
    who = f"{one.kind} {one.name}" + (f" ({one.role})" if one.role else "")
    return f"  {who}: " + ("accepted" if one.refused is None else f"REFUSED: {one.refused}")
