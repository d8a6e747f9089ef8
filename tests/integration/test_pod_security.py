"""Pod Security "restricted": the pods dtjob renders from every example, and the operator's own pod, are
admitted by the API server's PodSecurity admission in a namespace that enforces the restricted profile
(server-side dry-run: admission runs in full, nothing is stored). The GPUDirect profiles need host
paths and NET_ADMIN, which restricted forbids: they are refused, as docs/security.md says."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dtjob.core.render import render_children
from localcluster import Cluster
from tests.support.builders import manifest
from tests.support.chart import by_kind, render
from tests.support.namespaces import create_namespace
from tests.support.paths import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.fixture
def restricted(cluster_b: Cluster, core: client.CoreV1Api) -> Iterator[str]:
    name = f"t-restricted-{uuid.uuid4().hex[:6]}"
    labels = {ENFORCE: "restricted", f"{ENFORCE}-version": "latest"}
    create_namespace(core, name, labels)
    yield name
    core.delete_namespace(name)


def admit(core: client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> None:
    pod = copy.deepcopy(pod)
    pod["metadata"]["namespace"] = namespace
    pod["metadata"].pop("ownerReferences", None)  # its owner is not stored: dry-run only
    core.create_namespaced_pod(namespace, pod, dry_run="All")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_examples_pods_are_admitted_under_the_restricted_profile(
    core: client.CoreV1Api, restricted: str, example: Path
) -> None:
    job = yaml.safe_load(example.read_text())
    job["metadata"] |= {"namespace": restricted, "uid": str(uuid.uuid4()), "generation": 1}
    # The examples keep checkpoints on a hostPath of the one local node; restricted allows no hostPath,
    # so such a namespace checkpoints on a PersistentVolumeClaim (docs/security.md).
    job["spec"]["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": "checkpoints"}}
    pods = [child for child in render_children(job, 1) if child["kind"] == "Pod"]
    assert pods
    for pod in pods:
        admit(core, restricted, pod)


def test_the_operators_own_pod_is_admitted_under_the_restricted_profile(
    core: client.CoreV1Api, restricted: str
) -> None:
    template = by_kind(render(), "Deployment")[0]["spec"]["template"]
    template["spec"].pop("serviceAccountName")  # the chart's account is not installed here
    admit(core, restricted, {"apiVersion": "v1", "kind": "Pod", **template, "metadata": {"name": "operator"}})


@pytest.mark.parametrize("profile", ["GPUDirectTCPX", "GPUDirectTCPXO", "RDMA"])
def test_the_gpudirect_profiles_need_more_than_restricted(
    core: client.CoreV1Api, restricted: str, profile: str
) -> None:
    """From a template that is restricted itself: what is refused is the profile's plumbing."""
    template = yaml.safe_load((REPO / "examples" / "ddp-digits.yaml").read_text())["spec"]["replicas"][0]
    job = manifest(template, accelerator={"type": "nvidia-h100-80gb", "count": 8}, nccl={"profile": profile})
    pod = next(child for child in render_children(job, 1) if child["kind"] == "Pod")
    with pytest.raises(client.ApiException) as refused:
        admit(core, restricted, pod)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403 and 'restricted volume type "hostPath"' in message, message
    sidecars = [c["name"] for c in pod["spec"].get("initContainers", [])]
    assert all(f'container "{name}"' in message for name in sidecars), message  # NET_ADMIN
