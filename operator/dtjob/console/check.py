"""`dtjob check -f job.yaml`: on the user's own cluster, what a job would get before it is applied. It reads
what the operator reads (nodes, GPUDirect installers, Network objects, DRA DeviceClasses, DRANET nodes),
runs the operator's own first pass on the job, and sends what that pass would create to the apiserver with
dryRun=All, so that every admission refusal (quota, policy, Autopilot's rules, webhooks) shows now, not as
a job Pending for an hour. Nothing is written. Exit 0: nothing refused; 1: something was."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client
from pydantic import ValidationError

from dtjob.api import KIND, DistributedTrainingJobSpec
from dtjob.console.check_view import DryRun, report
from dtjob.core.gke import autopilot_cluster
from dtjob.core.kueue import QUEUE_LABEL
from dtjob.core.names import ROLE_LABEL
from dtjob.core.plan import Plan
from dtjob.core.reconcile import reconcile
from dtjob.core.world import GkeFacts, KueueFacts, Needs, World
from dtjob.kube.access import Kube
from dtjob.kube.client import api_client, use_kubeconfig

# The uid the first pass's children name as their owner: the job is not created, and a dry run does not
# look the owner up.
UNCREATED_UID: Final = "00000000-0000-0000-0000-000000000000"


def check(args: argparse.Namespace, print_line: Callable[[str], None]) -> int:
    job = _stored(Path(args.filename), args.namespace)
    if job.get("kind") != KIND:
        print_line(f"{args.filename}: kind is {job.get('kind')!r}, not {KIND}")
        return 1
    try:
        DistributedTrainingJobSpec.model_validate(job.get("spec") or {})
    except ValidationError as err:
        for error in err.errors():
            print_line(f"spec.{'.'.join(map(str, error['loc']))}: {error['msg']}")
        return 1
    use_kubeconfig(args.kubeconfig, args.context)
    if queue := (job["metadata"].get("labels") or {}).pop(QUEUE_LABEL, None):
        print_line(f"(in Kueue queue {queue}: checked as if admitted, without what its admission adds)")
    kube = Kube.at(qps=20, burst=20)
    gke = _cluster_facts(kube)
    plan = _first_pass(kube, job, gke)
    sent = [_dry_run(obj) for obj in [*plan.apply, *plan.create]]
    for line in report(job, gke, plan.status, plan.events, sent):
        print_line(line)
    invalid = any(c.get("type") == "Invalid" for c in (plan.status or {}).get("conditions") or [])
    return 1 if invalid or not sent or any(s.refused is not None for s in sent) else 0


def _stored(path: Path, namespace: str | None) -> dict[str, Any]:
    """The manifest as the apiserver would store it: in the namespace asked for (else its own, else
    default), with the uid and generation the first pass reads."""
    job: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    meta = job.setdefault("metadata", {})
    meta["namespace"] = namespace or meta.get("namespace") or "default"
    meta.update(uid=UNCREATED_UID, generation=1, creationTimestamp=_now().strftime("%Y-%m-%dT%H:%M:%SZ"))
    return job


def _now() -> datetime:
    return datetime.now(UTC)


def _cluster_facts(kube: Kube) -> GkeFacts:
    nodes: Any = client.CoreV1Api(api_client()).list_node(_preload_content=False)
    items = json.loads(nodes.data).get("items") or []
    return GkeFacts(
        networks=kube.read.read_networks(),
        device_classes=kube.read.read_device_classes(),
        installers=kube.read.read_gpudirect_daemonsets(),
        autopilot=autopilot_cluster(items),
        dranet_accelerators=kube.read.read_dranet_accelerators(),
    )


def _first_pass(kube: Kube, job: Mapping[str, Any], gke: GkeFacts) -> Plan:
    """The operator's first pass on the job, the cluster's facts read (a job outside Kueue asks for nothing
    else; a priority class is read if it asks)."""
    world = World(job, [], _now(), nodes=[], gke=gke, kueue=KueueFacts(served=False), listed=True)
    outcome = reconcile(world)
    if isinstance(outcome, Needs) and outcome.priority is not None:
        priority = kube.read.read_priority(outcome.priority)
        kueue = KueueFacts(served=False, priority=priority)
        outcome = reconcile(World(job, [], world.now, nodes=[], gke=gke, kueue=kueue, listed=True))
    if isinstance(outcome, Needs):
        raise RuntimeError(f"the operator's first pass still needs {outcome}")
    return outcome


def _dry_run(obj: Mapping[str, Any]) -> DryRun:
    meta = obj["metadata"]
    role = (meta.get("labels") or {}).get(ROLE_LABEL)
    api, namespace = api_client(), meta["namespace"]
    creates: dict[str, Callable[..., Any]] = {
        "Pod": client.CoreV1Api(api).create_namespaced_pod,
        "Service": client.CoreV1Api(api).create_namespaced_service,
        "NetworkPolicy": client.NetworkingV1Api(api).create_namespaced_network_policy,
        "ResourceClaimTemplate": client.ResourceV1Api(api).create_namespaced_resource_claim_template,
    }
    try:
        creates[obj["kind"]](namespace, obj, dry_run="All")
    except client.ApiException as err:
        return DryRun(obj["kind"], meta["name"], role, _message(err))
    return DryRun(obj["kind"], meta["name"], role, None)


def _message(err: client.ApiException) -> str:
    try:
        return str(json.loads(err.body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return f"{err.status} {err.reason}"
