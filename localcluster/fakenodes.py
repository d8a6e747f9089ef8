"""Tier B: kwok playing the kubelet for fake nodes shaped like GKE GPU nodes."""

from __future__ import annotations

import json
import subprocess

from localcluster.layout import HERE, KWOK_NODE_IP, KWOK_POD_CIDR, Layout
from localcluster.procs import Processes

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}
DEFAULT_ACCELERATOR = "nvidia-h100-80gb"
# kwok renews each fake node's Lease every quarter of its duration, as a kubelet does. At a kubelet's 40 s
# the fleet's 200 Leases were 19 of the idle cluster's 28 writes a second; at 160 s they are 5 (the idle
# control plane 8-10 % of a core instead of 24-32 %, with the node Stages in kwok-stages.yaml:
# docs/local-cluster.md). The node controller's grace period stands above the 40 s renewal
# (controlplane.NODE_MONITOR_GRACE). Tests lose a node by saying so (localcluster/sim.py), never by
# waiting for its Lease to run out.
LEASE_SECONDS = 160


def start(layout: Layout, procs: Processes) -> None:
    procs.start(
        "kwok",
        [layout.binary("kwok"), f"--kubeconfig={layout.kubeconfig()}", "--manage-all-nodes=false",
         f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
         f"--cidr={KWOK_POD_CIDR}", f"--node-ip={KWOK_NODE_IP}", f"--node-lease-duration-seconds={LEASE_SECONDS}",
         f"--config={HERE / 'kwok-stages.yaml'}", "--server-address=127.0.0.1:10247"],
    )  # fmt: skip
    procs.wait_until("kwok", lambda: _healthy(), "kwok /healthz")


def _healthy() -> bool:
    import urllib.request

    return urllib.request.urlopen("http://127.0.0.1:10247/healthz", timeout=2).status == 200


def gpu_node(
    index: int,
    accelerator: str = DEFAULT_ACCELERATOR,
    gpus: int = 8,
    spot: bool = False,
    extra_taints: tuple[dict, ...] = (),
) -> dict:
    """A Node object as GKE labels and taints an 8-GPU node; kwok keeps the given capacity. `extra_taints`
    keep other pods off it (a test's own node, which it may take away)."""
    pool = f"{accelerator}-{'spot' if spot else 'ondemand'}"
    name = f"gke-{pool}-{index:04d}"
    labels = {
        "type": "kwok",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "cloud.google.com/gke-accelerator": accelerator,
        "cloud.google.com/gke-accelerator-count": str(gpus),
        "cloud.google.com/gke-nodepool": pool,
        "cloud.google.com/gke-gpu": "true",
        "topology.kubernetes.io/zone": f"us-central1-{'abcf'[index % 4]}",
        "cloud.google.com/gce-topology-block": f"block-{index // 64}",
        "cloud.google.com/gce-topology-subblock": f"subblock-{index // 16}",
        "cloud.google.com/gce-topology-host": f"host-{index}",
        "nvidia.com/gpu.present": "true",
    }
    taints = [GPU_TAINT, *extra_taints]
    if spot:
        labels["cloud.google.com/gke-spot"] = "true"
        labels["cloud.google.com/gke-provisioning"] = "spot"
        taints.append(SPOT_TAINT)
    resources = {"cpu": "208", "memory": "1843Gi", "pods": "110", "nvidia.com/gpu": str(gpus),
                 "ephemeral-storage": "2Ti"}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {FAKE_NODE_ANNOTATION: "fake"},
        },
        "spec": {"taints": taints},
        "status": {"capacity": resources, "allocatable": resources},
    }


def fleet(count: int, spot_every: int = 4) -> list[dict]:
    """`count` fake GPU nodes; every `spot_every`-th one is a spot node."""
    return [gpu_node(i, spot=(spot_every > 0 and i % spot_every == spot_every - 1)) for i in range(count)]


def apply_nodes(layout: Layout, nodes: list[dict]) -> None:
    if not nodes:
        return
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes})
    proc = subprocess.run(
        [str(layout.kubectl), "--kubeconfig", str(layout.kubeconfig()), "apply", "--server-side",
         "--field-manager=dtjob-localcluster", "-f", "-"],
        input=body.encode(), capture_output=True,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"applying {len(nodes)} fake nodes failed: {proc.stderr.decode()}")
