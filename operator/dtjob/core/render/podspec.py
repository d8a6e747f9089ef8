"""Edits to a pod spec that keep what the template already has (volumes by name, mounts by path, ports by
number, init containers and claims by name, tolerations by equality), the trainer container, the nodes a
pod is kept off, Kueue's admission, and the metadata of every child."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Final

from dtjob.core.kueue import PodSetInfo
from dtjob.core.names import TRAINER_CONTAINER, JobRef

REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"


def trainer_container(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec["containers"]
    return next((c for c in containers if c.get("name") == TRAINER_CONTAINER), containers[0])


def admit(
    pod_spec: dict[str, Any], labels: dict[str, str], annotations: dict[str, str], admitted: PodSetInfo
) -> None:
    """Kueue's admission on top: where the flavor's nodes are (its nodeLabels win over the template's
    and the accelerator's selector), how to tolerate them, and the admission checks' updates."""
    pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **admitted.node_selector}
    merge_tolerations(pod_spec, admitted.tolerations)
    if admitted.scheduling_gates:
        gates = _list(pod_spec, "schedulingGates")
        gates += [dict(g) for g in admitted.scheduling_gates if g not in gates]
    labels.update(admitted.labels)
    annotations.update(admitted.annotations)


def avoid_nodes(pod_spec: dict[str, Any], nodes: Iterable[str]) -> None:
    """Keep the pod off `nodes` (by name): a NotIn added to every required node selector term of the
    template's (the terms are ORed, so each must exclude them), or a term of its own."""
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": list(nodes)}
    affinity = pod_spec["affinity"] = pod_spec.get("affinity") or {}
    node_affinity = affinity["nodeAffinity"] = affinity.get("nodeAffinity") or {}
    required = node_affinity[REQUIRED] = node_affinity.get(REQUIRED) or {}
    terms = required["nodeSelectorTerms"] = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        _list(term, "matchFields").append(copy.deepcopy(avoid))


def merge_tolerations(pod_spec: dict[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> None:
    existing = _list(pod_spec, "tolerations")
    existing += [dict(t) for t in tolerations if t not in existing]


def add_port(container: dict[str, Any], name: str, number: int) -> None:
    ports = _list(container, "ports")
    if not any(p.get("containerPort") == number or p.get("name") == name for p in ports):
        ports.append({"name": name, "containerPort": number, "protocol": "TCP"})


def add_volume(
    pod_spec: dict[str, Any], container: dict[str, Any], volume: dict[str, Any], mount_path: str
) -> None:
    """Add a volume and its mount, unless the template already has that volume name or mount path."""
    volumes, mounts = _list(pod_spec, "volumes"), _list(container, "volumeMounts")
    if any(v.get("name") == volume["name"] for v in volumes) or any(
        m.get("mountPath") == mount_path for m in mounts
    ):
        return
    volumes.append(volume)
    mounts.append({"name": volume["name"], "mountPath": mount_path})


def merge_by(owner: dict[str, Any], field: str, key: str, additions: Iterable[Mapping[str, Any]]) -> None:
    """Append deep copies of `additions` to owner[field], skipping those whose `key` is already there."""
    additions = list(additions)
    if additions:
        existing = _list(owner, field)
        present = {item.get(key) for item in existing}
        existing += [copy.deepcopy(dict(item)) for item in additions if item[key] not in present]


def _list(owner: dict[str, Any], field: str) -> list[Any]:
    """owner[field] as a list, created if missing or null."""
    if owner.get(field) is None:
        owner[field] = []
    items: list[Any] = owner[field]
    return items


def object_metadata(
    job: JobRef, name: str, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": job.namespace, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    metadata["ownerReferences"] = [job.owner_reference()]
    return metadata
