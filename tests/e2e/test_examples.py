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
from hack.current import CurrentCluster, checkpoints_on, localize
from hack.examples import fresh_checkpoint_dir
from localcluster import Cluster
from tests.support.jobs import Jobs
from tests.support.operator import running_operator
from tests.support.paths import REPO

# Parameter servers save the variables they hold into the chief's checkpoint: a directory every pod
# shares, which a cluster of yours (CLUSTER=current) does not offer this suite (it keeps checkpoints in
# each pod there), so this example runs on the local cluster only.
SHARED_CHECKPOINTS = {"tf-ps-digits"}
EXAMPLES = [
    pytest.param(
        path, id=path.stem, marks=[] if path.stem in SHARED_CHECKPOINTS else [pytest.mark.any_cluster]
    )
    for path in sorted((REPO / "examples").glob("*.yaml"))
]
IMAGE_OF = {image.ref: image for image in images.IMAGES.values()}


def images_of(manifest: dict[str, Any]) -> set[str]:
    return {c["image"] for r in manifest["spec"]["replicas"] for c in r["template"]["spec"]["containers"]}


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_trains_to_succeeded(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str, example: Path
) -> None:
    manifest = yaml.safe_load(example.read_text())
    localize(manifest, {ref: images.deliver(cluster_c, IMAGE_OF[ref]) for ref in images_of(manifest)})
    # On a cluster of yours (CLUSTER=current) the checkpoints stay in the pods: its nodes' disks are not
    # this machine's to prepare or read.
    checkpoints = None if isinstance(cluster_c, CurrentCluster) else fresh_checkpoint_dir(manifest)
    if checkpoints is None:
        checkpoints_on(manifest, claim=None)
    name = manifest["metadata"]["name"]
    with running_operator(cluster_c, namespace):
        cluster_c.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
        try:
            jobs.wait_condition(name, "Succeeded", timeout=600)
        except AssertionError:
            logs = {p.metadata.name: core.read_namespaced_pod_log(p.metadata.name, namespace, tail_lines=30)
                    for p in jobs.pods(name)}  # fmt: skip
            raise AssertionError(f"{name} did not succeed: {jobs.get(name).get('status')}\n{logs}") from None
    assert checkpoints is None or any(checkpoints.rglob("*")), f"no checkpoint written under {checkpoints}"
    if ((manifest["spec"].get("nccl") or {}).get("preflight") or {}).get("enabled"):
        measured = jobs.get(name)["status"]["preflight"]  # see also test_preflight.py
        assert measured["passed"] is True and measured["busBandwidthGbps"] > 0, measured
