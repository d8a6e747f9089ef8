"""The job's objects besides its pods: the headless Service, the NetworkPolicy, the ResourceClaimTemplate
of the GPU NICs."""

from __future__ import annotations

import copy
from typing import Any, Final

from dtjob.core.frameworks import Gang, wiring
from dtjob.core.gke import profile_for
from dtjob.core.names import (
    gpu_nic_claims_name,
    job_labels,
    network_policy_name,
    selector_labels,
    service_name,
)
from dtjob.core.render.podspec import object_metadata

# The pod's claim on its node's GPU NICs (ManagedRDMA), and the request in the ResourceClaimTemplate.
GPU_NIC_CLAIM: Final = "dtj-gpu-nics"
GPU_NIC_REQUEST: Final = "gpu-nics"


def render_service(gang: Gang) -> dict[str, Any]:
    """Headless, and publishing not-ready addresses: rank 0's name must resolve before any pod is Ready."""
    framework = wiring(gang.spec.framework)
    port = framework.port(gang.spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(gang.job, service_name(gang.job.name), job_labels(gang.job)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(gang.job.name),
            "ports": [{"name": framework.port_name, "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def render_network_policy(gang: Gang) -> dict[str, Any]:
    """Ingress to the job's pods only from the job's own pods, on every port and protocol: the rendezvous
    port, TF_CONFIG's ports, the ports NCCL and gloo open at run time, the preflight's. No egress rule
    (DNS, the checkpoint store and the image registry stay reachable). The kubelet's probes come from the
    node, which NetworkPolicy always admits; anything else that must reach the pods (a Prometheus
    scraping rank 0's DTJ_METRICS_PORT) needs a policy of its own: policies add up (docs/security.md)."""
    gang_pods = {"matchLabels": selector_labels(gang.job.name)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_metadata(gang.job, network_policy_name(gang.job.name), job_labels(gang.job)),
        "spec": {
            "podSelector": gang_pods,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": copy.deepcopy(gang_pods)}]}],
        },
    }


def render_gpu_nic_claims(gang: Gang) -> dict[str, Any] | None:
    """Under a profile that claims the GPU NICs through DRA: the ResourceClaimTemplate from which each GPU
    pod gets a claim on all of its node's NICs of that DeviceClass (allocationMode All, as Cluster
    Toolkit's default-rdma template asks). None otherwise. Its spec is immutable once created: a release
    that changes it must also change its name (names.gpu_nic_claims_name)."""
    if gang.spec.accelerator is None or gang.network is None:
        return None
    device_class = profile_for(gang.network, gang.spec, gang.autopilot).device_class
    if device_class is None:
        return None
    request = {"deviceClassName": device_class, "allocationMode": "All"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": object_metadata(gang.job, gpu_nic_claims_name(gang.job.name), job_labels(gang.job)),
        "spec": {"spec": {"devices": {"requests": [{"name": GPU_NIC_REQUEST, "exactly": request}]}}},
    }
