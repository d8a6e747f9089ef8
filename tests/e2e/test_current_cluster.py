"""`make demo CLUSTER=current` and `make test-e2e CLUSTER=current`: dtjob on a cluster it did not start.

The local cluster poses as someone else's: reached through a kubeconfig file of the user's own under a
context name of its own, with the images pushed to a registry (docker-registry on this machine) that its
node pulls from, and the operator installed from the tree's chart with the pushed image. The job's image
is the operator's (Python is all it needs), so the test pushes no GBs of torch; the demo's own run with the
torch image is in docs/own-cluster.md.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import demo, images
from hack.current import CurrentCluster, localize
from localcluster import Cluster
from tests.support.jobs import Jobs, pytorch_job
from tests.support.ports import free_port
from tests.support.waiting import wait_for

# Reads every node (a silenced own node of another test looks like a real GPU node).
pytestmark = pytest.mark.cluster_wide

CONTEXT = "someone-elses-cluster"


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """A registry on this machine (plain HTTP on 127.0.0.1, which containerd pulls from without TLS)."""
    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "registry.yml"
    config.write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn"}, "http": {"addr": address},
        "storage": {"filesystem": {"rootdirectory": str(tmp_path / "registry")}},
    }))  # fmt: skip
    log = (tmp_path / "registry.log").open("w")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)

    def serving() -> bool | None:
        assert server.poll() is None, (tmp_path / "registry.log").read_text()
        try:
            with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as resp:
                return resp.status == 200 or None
        except OSError:
            return None

    wait_for(serving, "the registry", timeout=30)
    yield address
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture
def users_kubeconfig(cluster_c: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's own kubeconfig (KUBECONFIG), whose current context names the cluster its own way."""
    config = yaml.safe_load(cluster_c.kubeconfig.read_text())
    old = config["current-context"]
    for context in config["contexts"]:
        if context["name"] == old:
            context["name"] = CONTEXT
    config["current-context"] = CONTEXT
    path = tmp_path / "kube" / "config"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def python_job(name: str, image: str) -> dict[str, Any]:
    """Two workers on any CPU node that check the rendezvous they were given and exit 0."""
    check = (
        "import os, sys; env = os.environ; "
        "sys.exit(0 if env['WORLD_SIZE'] == '2' and env['RANK'] in ('0', '1') and env['MASTER_ADDR'] else 3)"
    )
    job = pytorch_job(name, workers=2, checkpoint={"volume": {"emptyDir": {}}})
    del job["spec"]["accelerator"], job["spec"]["nccl"]
    container = job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    container.update(image=image, imagePullPolicy="IfNotPresent", command=["python3", "-c", check],
                     resources={"requests": {"cpu": "50m"}})  # fmt: skip
    return job


def test_the_operator_and_a_job_run_on_a_cluster_reached_through_the_users_kubeconfig_and_registry(
    cluster_c: Cluster, crd: dict[str, Any], jobs: Jobs, namespace: str, registry: str, users_kubeconfig: Path
) -> None:
    # The content the suite built for the local cluster; `images.archive` exports the node's copy of it.
    images.ensure(cluster_c, images.OPERATOR)
    theirs = CurrentCluster.from_kubeconfig(registry=registry)
    assert (theirs.kubeconfig, theirs.context) == (users_kubeconfig, CONTEXT)
    assert theirs.gpus() is None  # kwok's GPU nodes run no containers: the demo would train on gloo

    demo.install_operator(theirs, namespace, "--set", f"watchNamespaces={{{namespace}}}")
    try:
        pushed = f"{registry}/{images.OPERATOR.name}:{images.OPERATOR.version}"
        operator = json.loads(theirs.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
        assert [p["spec"]["containers"][0]["image"] for p in operator] == [pushed]

        job = localize(python_job("theirs", images.OPERATOR.ref), {images.OPERATOR.ref: pushed})
        theirs.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))
        jobs.wait_condition("theirs", "Succeeded", timeout=180)
        assert {p.spec.containers[0].image for p in jobs.pods("theirs")} == {pushed}
        # The node pulled it from the registry (the local cluster's own copy is localhost/...).
        assert cluster_c.node.has_image(pushed)
        with urllib.request.urlopen(f"http://{registry}/v2/_catalog", timeout=10) as resp:
            assert json.load(resp)["repositories"] == [images.OPERATOR.name]
    finally:
        subprocess.run([*theirs.helm_command(), "uninstall", "dtjob", "-n", namespace, "--wait"], check=True)
        # The registry's name for the image lives no longer than the registry (the content stays shared).
        cluster_c.node.ctr(
            "images", "rm", f"{registry}/{images.OPERATOR.name}:{images.OPERATOR.version}", check=False
        )
