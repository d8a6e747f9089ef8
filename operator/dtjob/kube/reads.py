"""What the watch caches cannot vouch for, read from the apiserver: a job after a write conflict, a node
the node cache does not hold, a pod the operator created that the pod watch has not delivered after a
while (the watch lags after an outage), a consistent listing of a job's pods, the cluster's GKE Network
objects, GPUDirect DaemonSets and DRA DeviceClasses once an attempt of a job whose network profile needs
them, the CRD, Kueue's API and priority classes, and the TokenReview of a progress reporter's token.

All calls are blocking (the official client) and pass the process's gate (its rate limit).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client

from dtjob.api import CRD_NAME, GROUP, PLURAL, VERSION
from dtjob.core import kueue, kueue_priority
from dtjob.core.gke import (
    DRANET_NODE_LABEL,
    NETWORK_GROUP,
    NETWORK_PLURAL,
    NETWORK_VERSION,
    PREREQUISITE_DAEMONSETS,
    PREREQUISITE_NAMESPACES,
    Installer,
)
from dtjob.core.names import JOB_NAME_LABEL
from dtjob.core.render.accelerator import ACCELERATOR_NODE_LABEL
from dtjob.kube.client import api_client, apps, core, custom, resource
from dtjob.kube.gate import Gate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodIdentity:
    """Who a pod-bound service account token belongs to, as the apiserver's TokenReview says."""

    namespace: str
    pod: str
    pod_uid: str


class Reader:
    def __init__(self, gate: Gate) -> None:
        self._gate = gate

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._gate.read()
        try:
            job = custom().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast(dict[str, Any], job)

    def review_token(self, token: str, audience: str) -> PodIdentity | None:
        """The pod a token was issued to, if the apiserver finds it valid for `audience` and bound to a pod
        that still exists (a projected token is); None otherwise."""
        self._gate.read()
        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[audience]))
        status = client.AuthenticationV1Api(api_client()).create_token_review(review).status
        if status is None or not status.authenticated or status.user is None:
            return None
        extra = status.user.extra or {}
        pod, uid = (
            extra.get("authentication.kubernetes.io/pod-name"),
            extra.get("authentication.kubernetes.io/pod-uid"),
        )
        parts = (status.user.username or "").split(":")  # system:serviceaccount:<namespace>:<name>
        if not pod or not uid or len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
            return None
        return PodIdentity(parts[2], pod[0], uid[0])

    def read_nodes(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """The named nodes, one GET each; a node that is gone is simply absent."""
        api, sanitize = core(), api_client().sanitize_for_serialization
        nodes = []
        for name in names:
            self._gate.read()
            try:
                nodes.append(cast(dict[str, Any], sanitize(api.read_node(name))))
            except client.ApiException as err:
                if err.status != 404:
                    raise
        return nodes

    def read_pods(self, pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """These pods as they are now, one GET each: one that is gone, or whose name another pod took, is
        absent."""
        api, sanitize = core(), api_client().sanitize_for_serialization
        found = []
        for pod in pods:
            meta = pod["metadata"]
            self._gate.read()
            try:
                now = cast(dict[str, Any], sanitize(api.read_namespaced_pod(meta["name"], meta["namespace"])))
            except client.ApiException as err:
                if err.status != 404:
                    raise
                continue
            if now["metadata"].get("uid") == meta.get("uid"):
                found.append(now)
        return found

    def list_job_pods(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The job's pods as the apiserver has them now (a consistent listing, not a cache)."""
        meta = job["metadata"]
        self._gate.read()
        listed: Any = core().list_namespaced_pod(
            meta["namespace"], label_selector=f"{JOB_NAME_LABEL}={meta['name']}", _preload_content=False
        )
        return cast(list[dict[str, Any]], json.loads(listed.data).get("items") or [])

    def read_networks(self) -> frozenset[str]:
        """The names of the cluster's GKE Network objects: none where that API is not served (not GKE, or
        GKE without multi-networking)."""
        self._gate.read()
        try:
            listed = cast(
                dict[str, Any],
                custom().list_cluster_custom_object(NETWORK_GROUP, NETWORK_VERSION, NETWORK_PLURAL),
            )
        except client.ApiException as err:
            if err.status == 404:
                return frozenset()
            raise
        return frozenset(item["metadata"]["name"] for item in listed.get("items") or [])

    def read_gpudirect_daemonsets(self) -> dict[str, Installer] | None:
        """The DaemonSets GPUDirect needs (nccl.PREREQUISITES) that the cluster runs, in the namespaces GKE's
        manifests put them (which say Standard or Autopilot), each with its pod template's images (an
        installer's say its plugin version); None when the operator may not list DaemonSets (a chart from
        before this check): then Auto does not judge them."""
        found: dict[str, Installer] = {}
        for namespace in PREREQUISITE_NAMESPACES:
            self._gate.read()
            try:
                listed: Any = apps().list_namespaced_daemon_set(namespace, _preload_content=False)
            except client.ApiException as err:
                if err.status == 403:
                    log.warning(
                        "may not list DaemonSets in %s: GPUDirect's installers are not checked", namespace
                    )
                    return None
                raise
            for item in json.loads(listed.data).get("items") or []:
                if (name := item["metadata"]["name"]) in PREREQUISITE_DAEMONSETS:
                    pod = ((item.get("spec") or {}).get("template") or {}).get("spec") or {}
                    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
                    found[name] = Installer(namespace, tuple(str(c.get("image", "")) for c in containers))
        return found

    def read_device_classes(self) -> frozenset[str]:
        """The names of the cluster's DRA DeviceClasses (GKE's managed DRANET installs mrdma.google.com): none
        where resource.k8s.io/v1 is not served or the operator may not list them (a chart from before this
        check; logged)."""
        self._gate.read()
        try:
            listed: Any = resource().list_device_class(_preload_content=False)
        except client.ApiException as err:
            if err.status == 403:
                log.warning("may not list DeviceClasses: managed DRANET is not looked for")
                return frozenset()
            if err.status == 404:
                return frozenset()
            raise
        return frozenset(item["metadata"]["name"] for item in json.loads(listed.data).get("items") or [])

    def read_dranet_accelerators(self) -> frozenset[str]:
        """The accelerator types (their cloud.google.com/gke-accelerator label) of the nodes GKE labels as
        running its managed DRANET driver: none where the operator may not list nodes (logged)."""
        self._gate.read()
        try:
            listed: Any = core().list_node(label_selector=f"{DRANET_NODE_LABEL}=true", _preload_content=False)
        except client.ApiException as err:
            if err.status == 403:
                log.warning("may not list nodes: managed DRANET is not looked for")
                return frozenset()
            raise
        labels = (item["metadata"].get("labels") or {} for item in json.loads(listed.data).get("items") or [])
        return frozenset(
            str(accelerator) for node in labels if (accelerator := node.get(ACCELERATOR_NODE_LABEL))
        )

    def read_crd(self) -> dict[str, Any] | None:
        """The installed DistributedTrainingJob CRD; None when there is none."""
        self._gate.read()
        api = client.ApiextensionsV1Api(api_client())
        try:
            answer: Any = api.read_custom_resource_definition(CRD_NAME, _preload_content=False)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast(dict[str, Any], json.loads(answer.data))

    def kueue_served(self) -> bool:
        """Whether the cluster serves Kueue's Workloads (discovery, which every authenticated user may read)."""
        self._gate.read()
        try:
            found: Any = custom().get_api_resources(kueue.GROUP, kueue.VERSION)
        except client.ApiException as err:
            if err.status == 404:
                return False
            raise
        return any(resource.name == kueue.WORKLOADS for resource in found.resources or [])

    def read_priority(self, wanted: kueue_priority.Priority) -> kueue_priority.Priority:
        """The value of the priority class a queued job names (value None when there is no such class), or
        the cluster's globalDefault PriorityClass where it names none."""
        self._gate.read()
        if wanted.global_default:
            classes: Any = client.SchedulingV1Api(api_client()).list_priority_class().items
            return kueue_priority.global_default_priority(
                (c.metadata.name, int(c.value), bool(c.global_default)) for c in classes
            )
        value: Any
        try:
            if wanted.source == kueue_priority.WORKLOAD_PRIORITY_SOURCE:
                found: Any = custom().get_cluster_custom_object(
                    kueue.GROUP, kueue.VERSION, kueue_priority.WORKLOAD_PRIORITY_CLASSES, wanted.class_name
                )
                value = found["value"]
            else:
                value = client.SchedulingV1Api(api_client()).read_priority_class(wanted.class_name).value
        except client.ApiException as err:
            if err.status == 404:
                return wanted
            raise
        return kueue_priority.Priority(wanted.source, wanted.class_name, int(value))
