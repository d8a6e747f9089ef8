"""Helpers tests use to play the kubelet of fake (kwok) nodes: see kwok-stages.yaml for the annotations."""

from __future__ import annotations

from typing import Any

from localcluster import fakenodes

EXIT_CODE = "sim.dtjob.io/exit-code"
REASON = "sim.dtjob.io/reason"
DISRUPTION = "sim.dtjob.io/disruption"
STUCK_TERMINATING = "sim.dtjob.io/stuck-terminating"


def _annotate(core: Any, namespace: str, name: str, annotations: dict[str, str]) -> None:
    core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}})


def exit_pod(core: Any, namespace: str, name: str, exit_code: int, reason: str | None = None) -> None:
    """The pod's containers terminate with `exit_code` (0: Succeeded, else Failed)."""
    _annotate(core, namespace, name, {EXIT_CODE: str(exit_code), **({REASON: reason} if reason else {})})


def preempt_pod(core: Any, namespace: str, name: str, reason: str = "TerminationByKubelet") -> None:
    """What GKE spot preemption leaves behind: Failed/Terminated with DisruptionTarget=True (`reason`)."""
    _annotate(core, namespace, name, {DISRUPTION: reason})


def stick_terminating(core: Any, namespace: str, name: str) -> None:
    """Once deleted, the pod is never finalised, like a pod whose node's kubelet is gone."""
    _annotate(core, namespace, name, {STUCK_TERMINATING: "true"})


def add_gpu_node(cluster: Any, index: int, spot: bool = False) -> str:
    node = fakenodes.gpu_node(index, spot=spot)
    fakenodes.apply_nodes(cluster.layout, [node])
    name: str = node["metadata"]["name"]
    cluster.wait_nodes_ready(1, label=f"kubernetes.io/hostname={name}", timeout=60)
    cluster.wait_node_schedulable(name, timeout=60)
    return name
