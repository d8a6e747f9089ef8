"""Whether a job's pods run in GKE's Autopilot mode, known from the cluster's own objects: what Autopilot
forbids (gcsfuse.py) is kept out of them, and GPUDirect takes the shape of Google's Autopilot recipes.

Google names no in-cluster flag for "this is an Autopilot cluster"; it documents which ComputeClass puts
pods in Autopilot mode (read 2026-11-29; tests/data/gke_recipes/autopilot.yaml, "detection"):
- "If a workload selects a ComputeClass that has the autopilot field enabled, GKE runs the Pods in
  Autopilot mode" (cloud.google.com/kubernetes-engine/docs/how-to/autopilot-classes-standard-clusters); a
  pod selects one with the node selector cloud.google.com/compute-class (.../how-to/autopilot-compute-classes).
- The built-in ComputeClasses `autopilot` and `autopilot-spot` are Autopilot ComputeClasses, and
  `autopilot` "is the default for Autopilot clusters in any GKE version" (.../concepts/
  about-built-in-compute-classes); Autopilot clusters offer the compute classes Accelerator, Balanced,
  Performance and Scale-Out (.../concepts/autopilot-compute-classes).
So a node labelled cloud.google.com/compute-class with one of those classes runs Autopilot-mode pods. A
second sign, for the nodes of a custom ComputeClass on an Autopilot cluster (which run in Autopilot mode
too, yet carry their own class's name): Autopilot names its nodes `gk3-<cluster>-...` where Standard names
them `gke-<cluster>-...` (in no Google document; seen on Autopilot clusters since their launch,
ahmet.im/blog/gke-autopilot, 2021, and in GKE's own examples since). A cluster all of whose nodes are
Autopilot's by either sign is an Autopilot cluster: one node of a custom class does not make it Standard.
A Standard cluster's own node pools carry neither, so it is never taken for Autopilot. The candidates left
aside: the WorkloadAllowlist and AllowlistSynchronizer CRDs (auto.gke.io) are installed in "any Autopilot
or Standard cluster" (.../how-to/autopilot-privileged-allowlists); the GPUDirect installers' namespaces
(gpudirect-system, rdma-system) say Autopilot only where GPUDirect is installed, and stay a second sign.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

COMPUTE_CLASS_LABEL: Final = "cloud.google.com/compute-class"
AUTOPILOT_COMPUTE_CLASSES: Final = frozenset(
    {"autopilot", "autopilot-spot", "Accelerator", "Balanced", "Performance", "Scale-Out"}
)
AUTOPILOT_NODE_PREFIX: Final = "gk3-"


def autopilot_node(node: Mapping[str, Any]) -> bool:
    """Whether GKE made this node for Autopilot: for an Autopilot ComputeClass, or named as Autopilot names
    its nodes (a custom ComputeClass's node on an Autopilot cluster)."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    return labels.get(COMPUTE_CLASS_LABEL) in AUTOPILOT_COMPUTE_CLASSES or str(
        meta.get("name", "")
    ).startswith(AUTOPILOT_NODE_PREFIX)


def autopilot_cluster(nodes: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the cluster is an Autopilot cluster: it has nodes, all of them Autopilot's. Read on every
    pass from the node cache: stops at the first node that is not (at once, on a Standard cluster)."""
    seen = False
    for node in nodes:
        if not autopilot_node(node):
            return False
        seen = True
    return seen


def selects_autopilot(pod_spec: Mapping[str, Any]) -> bool:
    """Whether a pod (template) selects an Autopilot ComputeClass, which runs it in Autopilot mode on any
    cluster (Standard clusters included)."""
    return (pod_spec.get("nodeSelector") or {}).get(COMPUTE_CLASS_LABEL) in AUTOPILOT_COMPUTE_CLASSES
