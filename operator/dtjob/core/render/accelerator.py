"""A GPU pod's wiring: on the accelerator's nodes (and Spot, flex-start, compact placement, Arm) with its
GPUs, and on the network profile's volumes, mounts, daemons and GPU NIC claim."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dtjob.api import DistributedTrainingJobSpec
from dtjob.core.frameworks import Gang
from dtjob.core.gke import machine_of, profile_for
from dtjob.core.names import gpu_nic_claims_name
from dtjob.core.render.network import GPU_NIC_CLAIM
from dtjob.core.render.podspec import merge_by, merge_tolerations

GPU_RESOURCE: Final = "nvidia.com/gpu"
# GKE taints Arm nodes (A4X's Grace CPUs); Google's A4X JobSet tolerates it (cluster-toolkit
# examples/gke-a4x/nccl-jobset-example.yaml at d1236e22, read 2026-11-26). The image must be built for arm64.
ARM64_TOLERATION: Final = {
    "key": "kubernetes.io/arch",
    "operator": "Equal",
    "value": "arm64",
    "effect": "NoSchedule",
}
ACCELERATOR_NODE_LABEL: Final = "cloud.google.com/gke-accelerator"
SPOT_NODE_LABEL: Final = "cloud.google.com/gke-spot"
PLACEMENT_GROUP_NODE_LABEL: Final = "cloud.google.com/gke-placement-group"
GPU_TOLERATION: Final = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
SPOT_TOLERATION: Final = {
    "key": SPOT_NODE_LABEL,
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
# GKE selects flex-start VMs by this label, which its autoscaler may also put on them as a taint
# ("a label / (optional) taint key used for nodes using Flex Start provisioning model"; GKE's "Run a small
# batch workload with GPUs and Flex-start VMs", updated 2026-06-09, selects it; both read 2026-12-07).
FLEX_START_NODE_LABEL: Final = "cloud.google.com/gke-flex-start"
FLEX_START_TOLERATION: Final = {
    "key": FLEX_START_NODE_LABEL,
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}


def wire_accelerator(
    pod_spec: dict[str, Any], container: dict[str, Any], spec: DistributedTrainingJobSpec
) -> None:
    assert spec.accelerator is not None
    selector = {**(pod_spec.get("nodeSelector") or {}), ACCELERATOR_NODE_LABEL: spec.accelerator.type}
    tolerations = [GPU_TOLERATION]
    if spec.accelerator.placement_group:
        selector[PLACEMENT_GROUP_NODE_LABEL] = spec.accelerator.placement_group
    if spec.accelerator.spot:
        selector[SPOT_NODE_LABEL] = "true"
        tolerations.append(SPOT_TOLERATION)
    if spec.accelerator.flex_start:
        selector[FLEX_START_NODE_LABEL] = "true"
        tolerations.append(FLEX_START_TOLERATION)
    if (machine := machine_of(spec)) is not None and machine.arm64:
        tolerations.append(ARM64_TOLERATION)
    pod_spec["nodeSelector"] = selector
    merge_tolerations(pod_spec, tolerations)
    resources = container["resources"] = dict(container.get("resources") or {})
    for kind in ("limits", "requests"):
        resources[kind] = {**(resources.get(kind) or {}), GPU_RESOURCE: str(spec.accelerator.count)}


def attach_network(gang: Gang, pod_spec: dict[str, Any], container: dict[str, Any]) -> Mapping[str, str]:
    """The network profile's node selector (the template's own win), volumes, trainer mounts, daemons (in
    the job's daemon image where it has one) and, under a profile that claims them, the GPU NIC claim;
    returns the profile's pod annotations."""
    network = profile_for(gang.network, gang.spec, gang.autopilot)
    pod_spec["nodeSelector"] = {**network.node_selector, **(pod_spec.get("nodeSelector") or {})}
    merge_by(pod_spec, "volumes", "name", network.volumes)
    merge_by(container, "volumeMounts", "mountPath", network.trainer_mounts)
    sidecars = [{**s, "image": gang.daemon_image or s["image"]} for s in network.sidecars]
    merge_by(pod_spec, "initContainers", "name", sidecars)
    if network.device_class is not None:
        claim = {"name": GPU_NIC_CLAIM, "resourceClaimTemplateName": gpu_nic_claims_name(gang.job.name)}
        merge_by(pod_spec, "resourceClaims", "name", [claim])
        merge_by(container.setdefault("resources", {}), "claims", "name", [{"name": GPU_NIC_CLAIM}])
    return network.annotations
