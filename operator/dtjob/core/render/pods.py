"""A job's pods: one per replica in rank order, and its hot spares; and the whole set of children."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from dtjob.api import GPU_ROLES, DistributedTrainingJobSpec, RestartStrategy, Role
from dtjob.core.frameworks import Gang, Member, wiring
from dtjob.core.gke import selects_autopilot
from dtjob.core.kueue import PodSetInfo
from dtjob.core.names import (
    ATTEMPT_RESYNC_ANNOTATION,
    RENDEZVOUS_HOST_ANNOTATION,
    JobRef,
    pod_dns_name,
    pod_labels,
    service_name,
    spare_labels,
    spare_pod_name,
)
from dtjob.core.preflight import preflight_container
from dtjob.core.render.accelerator import attach_network, wire_accelerator
from dtjob.core.render.env import injected_env, merge_env
from dtjob.core.render.gcsfuse import annotate_gcsfuse
from dtjob.core.render.network import render_gpu_nic_claims, render_network_policy, render_service
from dtjob.core.render.podspec import (
    add_port,
    admit,
    avoid_nodes,
    merge_by,
    object_metadata,
    trainer_container,
)
from dtjob.core.render.volumes import add_job_volumes

# A container that fails without writing a termination message gets the tail of its log there instead
# (at most 80 lines, 2 KiB), which restart Events and the status quote. One the trainer writes is kept.
TERMINATION_MESSAGE_POLICY: Final = "FallbackToLogsOnError"


def render_children(job: Mapping[str, Any], attempt: int) -> list[dict[str, Any]]:
    """The Service, the NetworkPolicy (when enabled) and the Pods of `attempt` for a whole custom resource
    (raises if its spec is invalid)."""
    return render(JobRef.of(job), DistributedTrainingJobSpec.model_validate(job["spec"]), attempt)


def render(job: JobRef, spec: DistributedTrainingJobSpec, attempt: int) -> list[dict[str, Any]]:
    gang = Gang.of(job, spec, attempt)
    policy = [render_network_policy(gang)] if spec.network_policy.enabled else []
    claims = [template] if (template := render_gpu_nic_claims(gang)) is not None else []
    return [render_service(gang), *policy, *claims, *(render_pod(gang, member) for member in gang.members)]


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

    container["env"] = merge_env(injected_env(gang, member, gpu_role, container), container.get("env") or [])
    framework = wiring(spec.framework)
    add_port(container, framework.port_name, framework.port(spec))
    add_job_volumes(gang, pod_spec, container)

    in_place = spec.run_policy.restart_strategy == RestartStrategy.IN_PLACE
    annotations: dict[str, str] = {RENDEZVOUS_HOST_ANNOTATION: gang.rendezvous_host} if in_place else {}
    if in_place and not spare:
        annotations[ATTEMPT_RESYNC_ANNOTATION] = str(gang.attempt)
    if gpu_role and spec.accelerator is not None:
        wire_accelerator(pod_spec, container, spec)
        annotations.update(attach_network(gang, pod_spec, container))
    if spec.nccl.preflight.enabled:  # last: after the network's sidecars, on the fully wired trainer
        merge_by(pod_spec, "initContainers", "name", [preflight_container(spec, gang.network, container)])

    if gang.avoided_nodes:
        avoid_nodes(pod_spec, gang.avoided_nodes)
    autopilot = gang.autopilot or selects_autopilot(pod_spec)
    annotate_gcsfuse(annotations, pod_spec, template_meta.get("annotations") or {}, autopilot)
    owned = (
        spare_labels(gang.job, member.role)
        if spare
        else pod_labels(gang.job, member.role, member.index, member.rank, gang.attempt)
    )
    labels = {**(template_meta.get("labels") or {}), **owned}
    if admitted is not None:
        admit(pod_spec, labels, annotations, admitted)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_metadata(gang.job, member.pod, labels, annotations),
        "spec": pod_spec,
    }
