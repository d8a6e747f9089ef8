"""A job's children: the headless Service, the NetworkPolicy if enabled, the ResourceClaimTemplate of the
GPU NICs under a profile that claims them (ManagedRDMA), one Pod per replica in rank order.

Pure and deterministic: the same job and attempt give byte-identical objects, ready for server-side
apply (apiVersion and kind set, no status). How the template is merged with what the operator injects:

- Labels: the template's, then the operator's (training.dtjob.io/job-name, job-uid, role, replica-index,
  rank: the position in the gang, attempt; a hot spare's: job-name, job-uid, role, spare) which win.
  Annotations: under restartStrategy InPlace training.dtjob.io/rendezvous-host (the DNS name of the pod
  that holds rank 0) and, on members, training.dtjob.io/attempt-resync (the attempt, names.py), the NCCL
  profile's, `gke-gcsfuse/volumes: "true"` when a volume is a Cloud Storage FUSE CSI volume (the
  checkpoint's or the template's) and with it no limit on the FUSE sidecar's CPU, memory and ephemeral
  storage (`gke-gcsfuse/*-limit: "0"`) unless the template sizes the sidecar itself or the pods take
  Autopilot's shape, then the template's, which win.
- The container named "trainer", else the first one, receives env, ports, mounts and GPU resources,
  and terminationMessagePolicy FallbackToLogsOnError unless the template sets one: a trainer that
  crashes without writing a termination message gets its last log lines there instead, and restart
  Events and the status quote them.
- With checkpoint.volume, the pod's securityContext.fsGroup is 1000 (the user the trainer images run
  as) unless the template sets one: the kubelet then makes a fresh, root-owned volume writable by the
  trainer. NFS and Filestore volumes are not changed: see "Checkpoint volumes" in fault-tolerance.md.
- Env is merged by name. Injected variables come first, in this order: DTJ_JOB_NAME, DTJ_ROLE,
  DTJ_REPLICA_INDEX, DTJ_ATTEMPT, DTJ_CHECKPOINT_DIR; the framework's rendezvous variables (PyTorch:
  MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK, LOCAL_RANK, PET_NNODES, PET_NPROC_PER_NODE,
  PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT; elastic PyTorch (spec.torch.elastic) instead: PET_NNODES,
  PET_NPROC_PER_NODE, PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_RDZV_ID, PET_RDZV_CONF, PET_MAX_RESTARTS,
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE; TensorFlow: TF_CONFIG); CLUSTER_SPEC; AIP_CHECKPOINT_DIR,
  AIP_MODEL_DIR, AIP_TENSORBOARD_LOG_DIR; DTJ_PROGRESS_URL and DTJ_PROGRESS_TOKEN_FILE when the operator
  takes progress reports (a projected token volume goes with them, docs/progress.md); then, on GPU roles, the NCCL profile's variables, NCCL_DEBUG,
  TORCH_NCCL_ASYNC_ERROR_HANDLING (PyTorch) and spec.nccl.env. The template's own entries follow in their
  order. A template entry with the same name as an injected one WINS for the tunables (AIP_* and all
  NCCL-profile variables) and is DROPPED for the rendezvous contract (DTJ_*, the framework's variables,
  CLUSTER_SPEC): a pod with its own RANK would break the gang.
- Volumes are merged by name, mounts by path, ports by number, init containers by name, tolerations by
  equality: what the template already has wins, so a template can replace /dev/shm or a profile's
  volume. The nodeSelector keys for the accelerator, Spot and the compact placement group are the
  operator's.
- Under a profile that claims the GPU NICs through DRA (ManagedRDMA), GPU pods get the claim
  `dtj-gpu-nics` from the job's ResourceClaimTemplate, and the trainer (so the preflight too) uses it; the
  template's own resourceClaims (an A4X ComputeDomain channel) are kept.
- On GPU roles, LD_LIBRARY_PATH is the network profile's library directories, then the template's own
  value (else what CUDA images set: /usr/local/nvidia/lib:/usr/local/nvidia/lib64). Kubernetes cannot
  see an image's environment: an image that needs more on it sets it in the template's env.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from dtjob.api import GPU_ROLES, DistributedTrainingJobSpec, RestartStrategy, Role
from dtjob.core.frameworks import Gang, Member, vertex_env, wiring
from dtjob.core.gke import library_path, machine_of, nccl_env, profile_for
from dtjob.core.kueue import PodSetInfo
from dtjob.core.names import (
    ATTEMPT_LABEL,
    ATTEMPT_RESYNC_ANNOTATION,
    RANK_LABEL,
    RENDEZVOUS_HOST_ANNOTATION,
    TRAINER_CONTAINER,
    JobRef,
    gpu_nic_claims_name,
    job_labels,
    network_policy_name,
    pod_dns_name,
    pod_labels,
    selector_labels,
    service_name,
    spare_labels,
    spare_pod_name,
)
from dtjob.core.preflight import preflight_container
from dtjob.core.progress import AUDIENCE, TOKEN_DIRECTORY, TOKEN_SECONDS

GPU_RESOURCE: Final = "nvidia.com/gpu"
# GKE taints Arm nodes (A4X's Grace CPUs); Google's A4X JobSet tolerates it (cluster-toolkit
# examples/gke-a4x/nccl-jobset-example.yaml at d1236e22, read 2026-11-26). The image must be built for arm64.
ARM64_TOLERATION: Final = {
    "key": "kubernetes.io/arch",
    "operator": "Equal",
    "value": "arm64",
    "effect": "NoSchedule",
}
LIBRARY_PATH: Final = "LD_LIBRARY_PATH"
ACCELERATOR_NODE_LABEL: Final = "cloud.google.com/gke-accelerator"
SPOT_NODE_LABEL: Final = "cloud.google.com/gke-spot"
PLACEMENT_GROUP_NODE_LABEL: Final = "cloud.google.com/gke-placement-group"
# Cloud Storage FUSE: GKE injects its sidecar into a pod only with this annotation (docs/gke.md).
GCSFUSE_DRIVER: Final = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATION: Final = "gke-gcsfuse/volumes"
# The sidecar's default limits (250m CPU, 256Mi memory, 5Gi ephemeral storage in the driver's webhook) throttle
# a gang's checkpoint writes and reads; "0" leaves each unlimited, as Google's GPU training recipes set
# them ("if limited the gcsfuse read performance decreases drastically"; tests/data/gke_recipes/gcsfuse.yaml).
# Autopilot does not accept "0" there (the driver's troubleshooting guide): its pods keep the defaults.
GCSFUSE_SIDECAR_UNLIMITED: Final = {
    f"gke-gcsfuse/{resource}-limit": "0" for resource in ("cpu", "memory", "ephemeral-storage")
}
GCSFUSE_SIDECAR_RESOURCES: Final = re.compile(r"^gke-gcsfuse/(.+)-(limit|request)$")
GPU_TOLERATION: Final = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
SPOT_TOLERATION: Final = {
    "key": SPOT_NODE_LABEL,
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
SHM_VOLUME: Final = "dtj-shm"
# The pod's claim on its node's GPU NICs (ManagedRDMA), and the request in the ResourceClaimTemplate.
GPU_NIC_CLAIM: Final = "dtj-gpu-nics"
GPU_NIC_REQUEST: Final = "gpu-nics"
CHECKPOINT_VOLUME: Final = "dtj-checkpoint"
# Under restartStrategy InPlace, the pod's attempt and rank labels and the rendezvous host as files (the
# downward API): the kubelet rewrites them together (one volume is swapped atomically) when the operator
# relabels a member kept for the next attempt or a spare that takes a rank, and the trainer runtime waits
# on them between rounds. A spare's attempt and rank files are empty. The env vars DTJ_ATTEMPT, RANK and
# MASTER_ADDR stay what they were when the pod was created.
ATTEMPT_DIRECTORY: Final = "/etc/dtjob/attempt"
ATTEMPT_FILE: Final = f"{ATTEMPT_DIRECTORY}/attempt"
ATTEMPT_VOLUME: Final = {
    "name": "dtj-attempt",
    "downwardAPI": {
        "items": [
            {"path": "attempt", "fieldRef": {"fieldPath": f"metadata.labels['{ATTEMPT_LABEL}']"}},
            {"path": "rank", "fieldRef": {"fieldPath": f"metadata.labels['{RANK_LABEL}']"}},
            {
                "path": "rendezvous-host",
                "fieldRef": {"fieldPath": f"metadata.annotations['{RENDEZVOUS_HOST_ANNOTATION}']"},
            },
        ]
    },
}
# The pod's token for the operator's progress intake: bound to the pod, for that audience only.
PROGRESS_TOKEN_VOLUME: Final = {
    "name": "dtj-progress-token",
    "projected": {
        "sources": [
            {
                "serviceAccountToken": {
                    "audience": AUDIENCE,
                    "expirationSeconds": TOKEN_SECONDS,
                    "path": "token",
                }
            }
        ]
    },
}
# A container that fails without writing a termination message gets the tail of its log there instead
# (at most 80 lines, 2 KiB), which restart Events and the status quote. One the trainer writes is kept.
TERMINATION_MESSAGE_POLICY: Final = "FallbackToLogsOnError"
# The uid (and gid) the trainer images run as: `USER 1000:1000` in trainer-images/torch/Dockerfile and
# trainer-images/tensorflow/Dockerfile. As fsGroup, the group the kubelet gives a fresh volume to.
TRAINER_IMAGE_UID: Final = 1000
REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"


def render_children(job: Mapping[str, Any], attempt: int) -> list[dict[str, Any]]:
    """The Service, the NetworkPolicy (when enabled) and the Pods of `attempt` for a whole custom resource
    (raises if its spec is invalid)."""
    return render(JobRef.of(job), DistributedTrainingJobSpec.model_validate(job["spec"]), attempt)


def render(job: JobRef, spec: DistributedTrainingJobSpec, attempt: int) -> list[dict[str, Any]]:
    gang = Gang.of(job, spec, attempt)
    policy = [render_network_policy(gang)] if spec.network_policy.enabled else []
    claims = [template] if (template := render_gpu_nic_claims(gang)) is not None else []
    return [render_service(gang), *policy, *claims, *(render_pod(gang, member) for member in gang.members)]


def render_service(gang: Gang) -> dict[str, Any]:
    """Headless, and publishing not-ready addresses: rank 0's name must resolve before any pod is Ready."""
    framework = wiring(gang.spec.framework)
    port = framework.port(gang.spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(gang.job, service_name(gang.job.name), job_labels(gang.job)),
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
        "metadata": _metadata(gang.job, network_policy_name(gang.job.name), job_labels(gang.job)),
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
        "metadata": _metadata(gang.job, gpu_nic_claims_name(gang.job.name), job_labels(gang.job)),
        "spec": {"spec": {"devices": {"requests": [{"name": GPU_NIC_REQUEST, "exactly": request}]}}},
    }


def render_spare(gang: Gang, role: Role, number: int, admitted: PodSetInfo | None = None) -> dict[str, Any]:
    """A hot spare of `role` (spec.replicas[].spares): the pod of the role's first member under its own
    name, labelled a spare (no index, rank or attempt). Its env names that member; the trainer runtime
    reads the rank it takes from the downward API files (ATTEMPT_VOLUME) instead."""
    name = spare_pod_name(gang.job.name, role, number)
    stand_in = replace(gang.of_role(role)[0], pod=name, host=pod_dns_name(name, gang.job))
    return render_pod(gang, stand_in, admitted, spare=True)


def render_pod(
    gang: Gang, member: Member, admitted: PodSetInfo | None = None, spare: bool = False
) -> dict[str, Any]:
    """`admitted`: what Kueue's admission adds to the pods of the member's role (a queued job's)."""
    spec = gang.spec
    template = copy.deepcopy(spec.replica(member.role).template)
    template_meta = template.get("metadata") or {}
    pod_spec: dict[str, Any] = template["spec"]
    pod_spec.update(hostname=member.pod, subdomain=service_name(gang.job.name), restartPolicy="Never")
    container = trainer_container(pod_spec)
    if container.get("terminationMessagePolicy") is None:
        container["terminationMessagePolicy"] = TERMINATION_MESSAGE_POLICY
    gpu_role = member.role in GPU_ROLES

    container["env"] = merge_env(_injected_env(gang, member, gpu_role, container), container.get("env") or [])
    framework = wiring(spec.framework)
    _add_port(container, framework.port_name, framework.port(spec))
    if spec.shared_memory.enabled:
        empty_dir = {
            "medium": "Memory",
            **({"sizeLimit": spec.shared_memory.size_limit} if spec.shared_memory.size_limit else {}),
        }
        _add_volume(pod_spec, container, {"name": SHM_VOLUME, "emptyDir": empty_dir}, "/dev/shm")
    if gang.progress_url is not None:
        _add_volume(pod_spec, container, copy.deepcopy(PROGRESS_TOKEN_VOLUME), TOKEN_DIRECTORY)
    in_place = spec.run_policy.restart_strategy == RestartStrategy.IN_PLACE
    if in_place:
        _add_volume(pod_spec, container, copy.deepcopy(ATTEMPT_VOLUME), ATTEMPT_DIRECTORY)
    if spec.checkpoint.volume is not None:
        _add_volume(
            pod_spec, container, {"name": CHECKPOINT_VOLUME, **spec.checkpoint.volume}, spec.checkpoint.path
        )
        _default_fs_group(pod_spec)

    annotations: dict[str, str] = {RENDEZVOUS_HOST_ANNOTATION: gang.rendezvous_host} if in_place else {}
    if in_place and not spare:
        annotations[ATTEMPT_RESYNC_ANNOTATION] = str(gang.attempt)
    if gpu_role and spec.accelerator is not None:
        _wire_accelerator(pod_spec, container, spec)
        network = profile_for(gang.network, spec, gang.autopilot)
        annotations.update(network.annotations)
        _merge_by(pod_spec, "volumes", "name", network.volumes)
        _merge_by(container, "volumeMounts", "mountPath", network.trainer_mounts)
        sidecars = [{**s, "image": gang.daemon_image or s["image"]} for s in network.sidecars]
        _merge_by(pod_spec, "initContainers", "name", sidecars)
        if network.device_class is not None:
            claim = {"name": GPU_NIC_CLAIM, "resourceClaimTemplateName": gpu_nic_claims_name(gang.job.name)}
            _merge_by(pod_spec, "resourceClaims", "name", [claim])
            _merge_by(container.setdefault("resources", {}), "claims", "name", [{"name": GPU_NIC_CLAIM}])
    if spec.nccl.preflight.enabled:  # last: after the network's sidecars, on the fully wired trainer
        _merge_by(pod_spec, "initContainers", "name", [preflight_container(spec, gang.network, container)])

    if gang.avoided_nodes:
        _avoid_nodes(pod_spec, gang.avoided_nodes)
    template_annotations = template_meta.get("annotations") or {}
    if any((v.get("csi") or {}).get("driver") == GCSFUSE_DRIVER for v in pod_spec.get("volumes") or []):
        annotations[GCSFUSE_ANNOTATION] = "true"
    annotations.update(template_annotations)
    sized = any(map(GCSFUSE_SIDECAR_RESOURCES.match, template_annotations))
    if annotations.get(GCSFUSE_ANNOTATION) == "true" and not sized and not gang.autopilot:
        annotations.update(GCSFUSE_SIDECAR_UNLIMITED)
    owned = (
        spare_labels(gang.job, member.role)
        if spare
        else pod_labels(gang.job, member.role, member.index, member.rank, gang.attempt)
    )
    labels = {**(template_meta.get("labels") or {}), **owned}
    if admitted is not None:
        _admit(pod_spec, labels, annotations, admitted)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(gang.job, member.pod, labels, annotations),
        "spec": pod_spec,
    }


def _admit(
    pod_spec: dict[str, Any], labels: dict[str, str], annotations: dict[str, str], admitted: PodSetInfo
) -> None:
    """Kueue's admission on top: where the flavor's nodes are (its nodeLabels win over the template's
    and the accelerator's selector), how to tolerate them, and the admission checks' updates."""
    pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **admitted.node_selector}
    _merge_tolerations(pod_spec, admitted.tolerations)
    if admitted.scheduling_gates:
        gates = _list(pod_spec, "schedulingGates")
        gates += [dict(g) for g in admitted.scheduling_gates if g not in gates]
    labels.update(admitted.labels)
    annotations.update(admitted.annotations)


def trainer_container(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec["containers"]
    return next((c for c in containers if c.get("name") == TRAINER_CONTAINER), containers[0])


def merge_env(
    injected: Iterable[tuple[str, str, bool]], user: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Injected (name, value, overridable) entries, then the user's; see the module docstring for who wins."""
    user = list(user)
    user_names = {e.get("name") for e in user}
    injected = list(injected)
    owned = {name for name, _, overridable in injected if not overridable}
    merged: list[dict[str, Any]] = [
        {"name": name, "value": value}
        for name, value, overridable in injected
        if not (overridable and name in user_names)
    ]
    merged += [dict(e) for e in user if e.get("name") not in owned]
    return merged


def _injected_env(
    gang: Gang, member: Member, gpu_role: bool, container: Mapping[str, Any]
) -> list[tuple[str, str, bool]]:
    spec = gang.spec
    framework = wiring(spec.framework)
    contract = [
        ("DTJ_JOB_NAME", gang.job.name),
        ("DTJ_ROLE", str(member.role)),
        ("DTJ_REPLICA_INDEX", str(member.index)),
        ("DTJ_ATTEMPT", str(gang.attempt)),
        ("DTJ_CHECKPOINT_DIR", spec.checkpoint.path),
        *framework.env(gang, member),
    ]
    if spec.run_policy.restart_strategy == RestartStrategy.IN_PLACE:
        contract.append(("DTJ_ATTEMPT_FILE", ATTEMPT_FILE))
    vertex = vertex_env(gang, member, framework.port(spec))
    tunables = [(name, value) for name, value in vertex if name != "CLUSTER_SPEC"]
    if gang.progress_url is not None:
        tunables += [
            ("DTJ_PROGRESS_URL", gang.progress_url),
            ("DTJ_PROGRESS_TOKEN_FILE", f"{TOKEN_DIRECTORY}/token"),
        ]
    contract += [(name, value) for name, value in vertex if name == "CLUSTER_SPEC"]
    if gpu_role:
        tunables += nccl_env(spec, gang.network, gang.autopilot)
    injected = [(name, value, False) for name, value in contract] + [
        (name, value, True) for name, value in tunables
    ]
    template_value = next(
        (e.get("value") for e in container.get("env") or [] if e.get("name") == LIBRARY_PATH), None
    )
    if gpu_role and (path := library_path(gang.network, template_value)) is not None:
        # Not overridable: it already holds the template's value, after the profile's directories.
        injected.append((LIBRARY_PATH, path, False))
    return injected


def _wire_accelerator(
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
    if (machine := machine_of(spec)) is not None and machine.arm64:
        tolerations.append(ARM64_TOLERATION)
    pod_spec["nodeSelector"] = selector
    _merge_tolerations(pod_spec, tolerations)
    resources = container["resources"] = dict(container.get("resources") or {})
    for kind in ("limits", "requests"):
        resources[kind] = {**(resources.get(kind) or {}), GPU_RESOURCE: str(spec.accelerator.count)}


def _avoid_nodes(pod_spec: dict[str, Any], nodes: Iterable[str]) -> None:
    """Keep the pod off `nodes` (by name): a NotIn added to every required node selector term of the
    template's (the terms are ORed, so each must exclude them), or a term of its own."""
    avoid = {"key": "metadata.name", "operator": "NotIn", "values": list(nodes)}
    affinity = pod_spec["affinity"] = pod_spec.get("affinity") or {}
    node_affinity = affinity["nodeAffinity"] = affinity.get("nodeAffinity") or {}
    required = node_affinity[REQUIRED] = node_affinity.get(REQUIRED) or {}
    terms = required["nodeSelectorTerms"] = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        _list(term, "matchFields").append(copy.deepcopy(avoid))


def _merge_tolerations(pod_spec: dict[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> None:
    existing = _list(pod_spec, "tolerations")
    existing += [dict(t) for t in tolerations if t not in existing]


def _default_fs_group(pod_spec: dict[str, Any]) -> None:
    """A fresh PVC is root-owned and the trainer is not root: fsGroup has the kubelet hand the volume to
    the trainer's group. The template's own fsGroup, and the rest of its securityContext, are kept."""
    security = pod_spec["securityContext"] = pod_spec.get("securityContext") or {}
    if security.get("fsGroup") is None:
        security["fsGroup"] = TRAINER_IMAGE_UID


def _add_port(container: dict[str, Any], name: str, number: int) -> None:
    ports = _list(container, "ports")
    if not any(p.get("containerPort") == number or p.get("name") == name for p in ports):
        ports.append({"name": name, "containerPort": number, "protocol": "TCP"})


def _add_volume(
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


def _merge_by(owner: dict[str, Any], field: str, key: str, additions: Iterable[Mapping[str, Any]]) -> None:
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


def _metadata(
    job: JobRef, name: str, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": job.namespace, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    metadata["ownerReferences"] = [job.owner_reference()]
    return metadata
