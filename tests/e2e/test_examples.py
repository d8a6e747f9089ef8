"""Every manifest in examples/ runs to Succeeded through the operator on the real node (tier C), with
real training in the trainer images built from trainer-images/*/Dockerfile and checkpoints on a shared
hostPath volume (and, where the example turns it on, an NCCL preflight that passed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from hack import images
from hack.examples import fresh_checkpoint_dir
from localcluster import Cluster
from tests.integration.conftest import REPO, Jobs, running_operator

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
IMAGE_OF = {image.ref: image for image in images.IMAGES.values()}


def images_of(manifest: dict[str, Any]) -> set[str]:
    return {c["image"] for r in manifest["spec"]["replicas"] for c in r["template"]["spec"]["containers"]}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_example_trains_to_succeeded(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str, example: Path
) -> None:
    manifest = yaml.safe_load(example.read_text())
    for ref in images_of(manifest):
        images.ensure(cluster_c, IMAGE_OF[ref])
    checkpoints = fresh_checkpoint_dir(manifest)
    name = manifest["metadata"]["name"]
    with running_operator(cluster_c, namespace):
        cluster_c.kubectl("apply", "-n", namespace, "-f", str(example))
        try:
            jobs.wait_condition(name, "Succeeded", timeout=600)
        except AssertionError:
            logs = {p.metadata.name: core.read_namespaced_pod_log(p.metadata.name, namespace, tail_lines=30)
                    for p in jobs.pods(name)}  # fmt: skip
            raise AssertionError(f"{name} did not succeed: {jobs.get(name).get('status')}\n{logs}") from None
    assert any(checkpoints.rglob("*")), f"no checkpoint written under {checkpoints}"
    if ((manifest["spec"].get("nccl") or {}).get("preflight") or {}).get("enabled"):
        measured = jobs.get(name)["status"]["preflight"]  # see also test_preflight.py
        assert measured["passed"] is True and measured["busBandwidthGbps"] > 0, measured
