"""A job admitted through Kueue: the Workload dtjob makes for it, and what Kueue's admission says. Pure.

dtjob is one of Kueue's external frameworks (Kueue's `integrations.externalFrameworks` lists
`DistributedTrainingJob.v1alpha1.training.dtjob.io`): for a job labelled `kueue.x-k8s.io/queue-name`
the operator creates one Workload, owned by the job, with a podSet per role whose count and pod template
(requests included) are the rendered pods'. Kueue decides; the operator acts on the decision as Kueue's
own job integrations do (jobframework's reconciler): no pod until the Workload is admitted; then every
pod gets its flavors' nodeLabels and tolerations and the admission checks' podSetUpdates; an eviction
takes the gang away and, once no pod is left, hands the quota back (the admission cleared, the Workload
requeued); a finished job marks its Workload Finished, which frees the quota.

Why not Kueue's pod-group integration: its pods exist, gated, before admission (a gang that is not
admitted would still show pods, count against pod quotas and need Kueue's webhook on every pod create),
and the group's rank wiring and restarts would be split between Kueue and dtjob.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from dtjob.api import GROUP as API_GROUP
from dtjob.api import KIND
from dtjob.core.kueue_priority import Priority
from dtjob.core.kueue_waiting import inactive, waiting_for, where
from dtjob.core.names import RANK_LABEL, REPLICA_INDEX_LABEL, ROLE_LABEL, JobRef, job_labels

GROUP: Final = "kueue.x-k8s.io"
VERSION: Final = "v1beta1"
WORKLOADS: Final = "workloads"
WORKLOAD_NAME_PREFIX: Final = 252 - 5  # an object name's 253 characters, less '-' and the hash
# On every Workload dtjob makes, as on Kueue's own integrations' (core/workload_release.py).
RESOURCE_IN_USE: Final = f"{GROUP}/resource-in-use"
PROVISIONING_PARAMETER_PREFIX: Final = "provreq.kueue.x-k8s.io/"
# GKE taints the nodes of queued provisioning (DWS) pools cloud.google.com/gke-queued=true:NoSchedule, and
# Kueue's provisioning check gives the pods of the request only its annotations (which name the class):
# such a pod tolerates the taint, or the nodes provisioned for it refuse it (../shared/reference
# platform-facts.md 1.5-1.6: GKE's ProvisioningRequest and GPUDirect-RDMA guides, read 2026-11-24).
PROVISIONING_CLASS_ANNOTATION: Final = "autoscaling.x-k8s.io/provisioning-class-name"
QUEUED_PROVISIONING_CLASS: Final = "queued-provisioning.gke.io"
QUEUED_PROVISIONING_TOLERATION: Final = {
    "key": "cloud.google.com/gke-queued",
    "operator": "Exists",
    "effect": "NoSchedule",
}
RESOURCE_FLAVORS: Final = "resourceflavors"
LOCAL_QUEUES: Final = "localqueues"
QUEUE_LABEL: Final = f"{GROUP}/queue-name"
# A role's topology request (Topology Aware Scheduling), as Kueue's integrations take it: an annotation
# on the pod template naming a level of the flavor's Topology (e.g. cloud.google.com/gce-topology-block).
TOPOLOGY_ANNOTATIONS: Final = {
    "required": f"{GROUP}/podset-required-topology",
    "preferred": f"{GROUP}/podset-preferred-topology",
}
UNCONSTRAINED_TOPOLOGY_ANNOTATION: Final = f"{GROUP}/podset-unconstrained-topology"
# On each admitted pod, as Kueue's own integrations put them (its TAS ungater reads them).
POD_SET_LABEL: Final = f"{GROUP}/podset"
GANG_POD_SET: Final = "gang"
"""The one podSet of a gang whose roles share a topology request and a scheduling shape."""
WORKLOAD_ANNOTATION: Final = f"{GROUP}/workload"
# Kueue's reason for an eviction at the PodsReady timeout (workload_types.go).
PODS_READY_TIMEOUT: Final = "PodsReadyTimeout"
# Evictions that are Kueue's housekeeping, not a preemption (workload_types.go, v0.14.0 to v0.17.0): the
# PodsReady timeout (its requeuingStrategy counts and bounds those), a ClusterQueue or LocalQueue stopped
# with HoldAndDrain, and a deactivation (spec.active false: by a user, or by Kueue past the requeuing
# limit; "InactiveWorkload" before v0.9, "Deactivated" after, with "DeactivatedDueTo..." variants).
REQUEUE_EVICTIONS: Final = frozenset(
    {PODS_READY_TIMEOUT, "ClusterQueueStopped", "LocalQueueStopped", "InactiveWorkload", "Deactivated"}
)
DEACTIVATION_PREFIXES: Final = ("DeactivatedDueTo", "EvictedDueToDeactivated")
# On the Workload: a digest of what Kueue counts and places of its podSets (`pod_sets_digest`), so that a
# pass sees whether the job's pods still match it without reading the podSets back.
POD_SETS_ANNOTATION: Final = f"{API_GROUP}/workload-pod-sets"


class State(StrEnum):
    MISSING = "Missing"
    """No Workload yet: the operator creates it."""
    PENDING = "Pending"
    """Waiting for quota or for admission checks."""
    ADMITTED = "Admitted"
    EVICTED = "Evicted"
    """Kueue took the admission back; it keeps the quota until the operator says the gang is gone."""
    FINISHED = "Finished"


@dataclass(frozen=True)
class PodSetInfo:
    """What the admission adds to every pod of one podSet (a role)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    scheduling_gates: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Queueing:
    """A queued job's Workload as Kueue left it."""

    queue: str
    state: State
    workload: Mapping[str, Any] | None = None
    cluster_queue: str | None = None
    message: str = ""
    """Why it waits (Kueue's words), or why it was evicted."""
    pod_sets: Mapping[str, PodSetInfo] = field(default_factory=dict)
    """By podSet name (`pod_set_name(role)`), once admitted."""
    active: bool = True
    """The Workload's spec.active: false, Kueue neither admits it nor keeps it admitted."""
    evicted_by: str = ""
    """Kueue's reason for an eviction (Preempted, PodsReadyTimeout, ...), while Evicted."""

    @property
    def requeued(self) -> bool:
        """Evicted for Kueue's own reasons (REQUEUE_EVICTIONS, or the Workload deactivated), which Kueue
        bounds itself: not a preemption of the gang (priority, a cohort's reclaim, a check retracted)."""
        return self.state == State.EVICTED and (
            not self.active
            or self.evicted_by in REQUEUE_EVICTIONS
            or self.evicted_by.startswith(DEACTIVATION_PREFIXES)
        )


def queue_of(job: Mapping[str, Any]) -> str | None:
    return (job["metadata"].get("labels") or {}).get(QUEUE_LABEL) or None


def pod_sets_digest(pod_sets: Sequence[Mapping[str, Any]]) -> str:
    """A digest of what Kueue counts and places of `pod_sets`: each one's name, count, topology request and
    its template's scheduling shape (requests, node selection, tolerations, priority), not the attempt's
    env and labels, which change at every restart without changing the quota."""
    shapes = [
        [s["name"], s["count"], s.get("topologyRequest"), _scheduling_shape(s["template"])] for s in pod_sets
    ]
    return hashlib.sha256(json.dumps(shapes, sort_keys=True).encode()).hexdigest()[:16]


def workload_name(job: JobRef) -> str:
    """As Kueue names its own integrations' Workloads (jobframework: GetWorkloadNameForOwnerWithGVK): the
    kind and the job's name, then a hash of the kind, group, name and uid, so that a leftover Workload of an
    earlier job of the same name (a job created again before the garbage collector took the old one's)
    never takes the name of the new one's. Workloads made by earlier releases are `dtjob-<job>`: they are
    found by owner, and keep their name."""
    digest = hashlib.sha1(f"{KIND}\n{API_GROUP}\n{job.name}\n{job.uid}".encode()).hexdigest()
    return f"{KIND.lower()}-{job.name}"[:WORKLOAD_NAME_PREFIX] + "-" + digest[:5]


def pod_set_name(role: str) -> str:
    return role.lower()


def pod_set_of(pod_sets: Mapping[str, PodSetInfo], role: str) -> PodSetInfo | None:
    """What the admission adds to a role's pods: its gang's podSet's, when the Workload has one (see
    render_workload), else its own."""
    return pod_sets.get(GANG_POD_SET) or pod_sets.get(pod_set_name(role))


def render_workload(
    job: Mapping[str, Any],
    ref: JobRef,
    queue: str,
    pods: Sequence[Mapping[str, Any]],
    priority: Priority | None = None,
) -> dict[str, Any]:
    """The Workload of a queued job: a podSet per role, in the order of `pods` (rank order), each with
    the role's count and its first pod as the template (what Kueue counts the requests from);
    `priority`, the class the job names, read (Kueue orders and preempts by spec.priority).

    A gang whose roles ask for one topology and are scheduled alike (same requests, selectors,
    tolerations, affinity) is one podSet, `gang`, of every pod, ranks in order: Kueue then places the
    whole gang in one domain, a Master beside its Workers. Kueue's own grouping of podSets
    (podSetGroupName) would keep the roles apart, but Kueue v0.14.0 admitted such groups with an empty
    topology assignment in 2 of 4 runs here, their pods gated for good (fixed upstream later:
    kubernetes-sigs/kueue#10783), and groups hold 2 podSets at most."""
    one_gang = _one_topology_domain(pods)
    pod_sets: dict[str, dict[str, Any]] = {}
    for pod in pods:
        name = GANG_POD_SET if one_gang else pod_set_name(pod["metadata"]["labels"][ROLE_LABEL])
        if name in pod_sets:
            pod_sets[name]["count"] += 1
            continue
        template_meta = {k: v for k, v in pod["metadata"].items() if k in ("labels", "annotations")}
        pod_sets[name] = {
            "name": name,
            "count": 1,
            "template": {"metadata": template_meta, "spec": pod["spec"]},
        }
        if (request := _topology_request(pod, RANK_LABEL if one_gang else REPLICA_INDEX_LABEL)) is not None:
            pod_sets[name]["topologyRequest"] = request
    # priorityClassSource named even when empty: Kueue v0.14's schema defaulted it, but its immutability
    # rule reads it, and the v1beta1 schema served by v0.15 and later (converted to v1beta2) has no default.
    spec: dict[str, Any] = {"queueName": queue, "podSets": list(pod_sets.values()), "priorityClassSource": ""}
    if priority is not None and priority.value is not None and priority.class_name:
        spec.update(
            priorityClassName=priority.class_name,
            priorityClassSource=priority.source,
            priority=priority.value,
        )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(ref),
            "namespace": ref.namespace,
            "labels": job_labels(ref),
            "annotations": {
                **_provisioning_parameters(job),
                POD_SETS_ANNOTATION: pod_sets_digest(spec["podSets"]),
            },
            "ownerReferences": [ref.owner_reference()],
            "finalizers": [RESOURCE_IN_USE],
        },
        "spec": spec,
    }


def _provisioning_parameters(job: Mapping[str, Any]) -> dict[str, str]:
    """The job's `provreq.kueue.x-k8s.io/*` annotations, which Kueue's provisioning check passes to the
    ProvisioningRequest as parameters (GKE's DWS reads `maxRunDurationSeconds`): on the Workload, as
    jobframework copies them from its jobs."""
    annotations = job["metadata"].get("annotations") or {}
    return {k: str(v) for k, v in annotations.items() if k.startswith(PROVISIONING_PARAMETER_PREFIX)}


def _one_topology_domain(pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the gang's roles all ask for the same topology and are scheduled alike."""
    roles = {pod["metadata"]["labels"][ROLE_LABEL] for pod in pods}
    if len(roles) < 2 or _topology_request(pods[0], RANK_LABEL) is None:
        return False
    return len({_scheduling_shape(pod) for pod in pods}) == 1


def _scheduling_shape(pod: Mapping[str, Any]) -> str:
    """What Kueue reads of a pod to count and place it: its topology request, requests (a limit where the
    request is missing, as Kueue counts it: workload.AdjustResources), node selection, tolerations and
    priority."""
    spec = pod["spec"]
    shape = {
        "topology": _topology_request(pod, RANK_LABEL),
        "requests": [
            _counted_requests(c) for key in ("initContainers", "containers") for c in spec.get(key) or []
        ],
        **{key: spec.get(key) for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName")},
    }
    return json.dumps(shape, sort_keys=True)


def _counted_requests(container: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A container's requests as Kueue counts them: its limit for a resource it requests nothing of.
    Its requests as given where no limit adds to them, so that the digests of Workloads written before
    limits were counted stay the same."""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests"), resources.get("limits") or {}
    if all(name in (requests or {}) for name in limits):
        return requests
    return {**limits, **(requests or {})}


def _topology_request(pod: Mapping[str, Any], index_label: str) -> dict[str, Any] | None:
    """A podSet's Topology Aware Scheduling request, from its template's Kueue annotations: Kueue places
    the podSet's pods in one domain of the level named, in the order of `index_label`'s values."""
    annotations = pod["metadata"].get("annotations") or {}
    request: dict[str, Any] = {
        key: annotations[a] for key, a in TOPOLOGY_ANNOTATIONS.items() if annotations.get(a)
    }
    if annotations.get(UNCONSTRAINED_TOPOLOGY_ANNOTATION) == "true":
        request["unconstrained"] = True
    if not request:
        return None
    return {**request, "podIndexLabel": index_label}


def read(
    queue: str,
    workload: Mapping[str, Any] | None,
    flavors: Mapping[str, Mapping[str, Any]],
    served: bool = True,
    routes: Mapping[str, str] | None = None,
) -> Queueing:
    """Where Kueue stands with a queued job's Workload; `flavors`: the ResourceFlavors by name; `served`:
    whether the operator found Kueue's API when it started (a queued job never runs around Kueue);
    `routes`: the ClusterQueue of each LocalQueue of the job's namespace, when read (a name missing:
    no such LocalQueue)."""
    if not served:
        message = (
            f"the job names LocalQueue {queue}, but the operator found no Kueue API ({GROUP}/{VERSION} "
            "Workloads) when it started: install Kueue, then restart the operator"
        )
        return Queueing(queue, State.PENDING, message=message)
    place = where(queue, routes)
    if workload is None:
        return Queueing(queue, State.MISSING, message=f"creating its Workload in {place}")
    status = workload.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    admission = status.get("admission")
    active = (workload.get("spec") or {}).get("active", True) is not False
    cluster_queue = (admission or {}).get("clusterQueue")

    def true(type_: str) -> bool:
        return (conditions.get(type_) or {}).get("status") == "True"

    def said(type_: str) -> str:
        return str((conditions.get(type_) or {}).get("message") or "")

    if true("Finished"):
        finished = conditions["Finished"]
        why = ": ".join(str(part) for part in (finished.get("reason"), finished.get("message")) if part)
        return Queueing(queue, State.FINISHED, workload, cluster_queue, why, active=active)
    if true("Evicted") and admission is not None:
        by = str(conditions["Evicted"].get("reason") or "")
        return Queueing(
            queue, State.EVICTED, workload, cluster_queue, said("Evicted"), active=active, evicted_by=by
        )
    if true("Admitted") and admission is not None:
        pod_sets, problem = _pod_sets(workload, admission, flavors)
        if problem is not None:
            return Queueing(queue, State.PENDING, workload, cluster_queue, problem, active=active)
        message = f"admitted by ClusterQueue {cluster_queue}"
        return Queueing(queue, State.ADMITTED, workload, cluster_queue, message, pod_sets, active)
    waiting = waiting_for(place, cluster_queue, said("QuotaReserved"), status) if active else inactive(status)
    return Queueing(queue, State.PENDING, workload, cluster_queue, waiting, active=active)


def _pod_sets(
    workload: Mapping[str, Any], admission: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, PodSetInfo], str | None]:
    """Each podSet's additions, as jobframework's getPodSetsInfoFromStatus builds them: the flavors'
    nodeLabels and tolerations, the podSet label and the Workload annotation, TAS's gate (and, placed by
    implicit TAS, the unconstrained-topology annotation), then every admission check's podSetUpdates (and,
    for GKE's queued provisioning, the toleration of its nodes' taint). A flavor the operator has not seen
    yet: the pods wait for it."""
    infos: dict[str, PodSetInfo] = {}
    requests = {
        ps.get("name"): ps.get("topologyRequest") or {}
        for ps in (workload.get("spec") or {}).get("podSets") or []
    }
    for assignment in admission.get("podSetAssignments") or []:
        name = str(assignment["name"])
        info = PodSetInfo(
            labels={POD_SET_LABEL: name}, annotations={WORKLOAD_ANNOTATION: workload["metadata"]["name"]}
        )
        if assignment.get("topologyAssignment"):
            info.scheduling_gates.append({"name": f"{GROUP}/topology"})
            if all(requests.get(name, {}).get(k) is None for k in ("required", "preferred", "unconstrained")):
                # Implicit TAS (a ClusterQueue of TAS flavors only, nothing asked): Kueue's ungater takes a
                # pod only when it says it is placed by TAS, as Kueue's own integrations mark it.
                info.annotations[UNCONSTRAINED_TOPOLOGY_ANNOTATION] = "true"
        for flavor_name in dict.fromkeys((assignment.get("flavors") or {}).values()):
            flavor = flavors.get(flavor_name)
            if flavor is None:
                return {}, f"admitted with ResourceFlavor {flavor_name}, which the operator has not seen yet"
            spec = flavor.get("spec") or {}
            info.node_selector.update(spec.get("nodeLabels") or {})
            info.tolerations.extend(spec.get("tolerations") or [])
        for check in (workload.get("status") or {}).get("admissionChecks") or []:
            for update in check.get("podSetUpdates") or []:
                if update.get("name") != name:
                    continue
                for what, into in (
                    ("labels", info.labels),
                    ("annotations", info.annotations),
                    ("nodeSelector", info.node_selector),
                ):
                    for key, value in (update.get(what) or {}).items():
                        if into.get(key, value) != value:
                            return {}, (
                                f"admission check {check.get('name')} sets {what} {key}={value} on podSet {name}, "
                                f"which already has {key}={into[key]}"
                            )
                        into[key] = value
                info.tolerations.extend(update.get("tolerations") or [])
        if info.annotations.get(PROVISIONING_CLASS_ANNOTATION) == QUEUED_PROVISIONING_CLASS:
            info.tolerations.append(QUEUED_PROVISIONING_TOLERATION)
        infos[name] = info
    return infos, None
