"""The pieces of `CLUSTER=current` that need no cluster: which context, which image references, GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dtjob.api import DistributedTrainingJobSpec
from hack.current import (
    CurrentCluster,
    CurrentClusterError,
    Gpus,
    checkpoints_on,
    localize,
    pinned_kubeconfig,
)
from hack.demo import EXAMPLE
from hack.images import TORCH_TRAINER


def kubeconfig(tmp_path: Path, current: str = "kind-dev", *others: str) -> Path:
    path = tmp_path / "config"
    contexts = [{"name": n, "context": {"cluster": n, "user": n}} for n in (current, *others)]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": current,
                                    "contexts": contexts, "clusters": [], "users": []}))  # fmt: skip
    return path


def job(*images: str, init: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    }
    if init:
        spec["initContainers"] = [{"name": "init", "image": init}]
    return {"spec": {"replicas": [{"role": "Worker", "template": {"spec": spec}}]}}


def test_the_context_is_the_kubeconfigs_current_one_unless_one_is_named(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, "kind-dev", "gke_proj_zone_train")
    assert CurrentCluster.from_kubeconfig(kubeconfig=path).context == "kind-dev"
    named = CurrentCluster.from_kubeconfig(
        "gke_proj_zone_train", "europe-docker.pkg.dev/p/r/", kubeconfig=path
    )
    assert (named.context, named.registry) == ("gke_proj_zone_train", "europe-docker.pkg.dev/p/r")


def test_an_unknown_context_or_a_missing_kubeconfig_is_refused_naming_what_there_is(tmp_path: Path) -> None:
    with pytest.raises(
        CurrentClusterError, match=r"has no context 'prod' \(it has: gke-a, kind-dev; only the first"
    ):
        CurrentCluster.from_kubeconfig("prod", kubeconfig=kubeconfig(tmp_path, "kind-dev", "gke-a"))
    with pytest.raises(CurrentClusterError, match=r"no kubeconfig at .*missing: set KUBECONFIG to"):
        CurrentCluster.from_kubeconfig(kubeconfig=tmp_path / "missing")


def test_images_are_named_after_the_registry_or_kept_local_for_kind_and_minikube(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path)
    pushed = CurrentCluster.from_kubeconfig(registry="127.0.0.1:5000", kubeconfig=path)
    assert pushed.image_ref("dtjob-trainer-torch", "0.1.0") == "127.0.0.1:5000/dtjob-trainer-torch:0.1.0"
    loaded = CurrentCluster.from_kubeconfig(kubeconfig=path)
    assert loaded.image_ref("dtjob-operator", "0.2.0") == "localhost/dtjob-operator:0.2.0"


def test_a_cluster_neither_kind_nor_minikube_without_a_registry_is_told_to_name_one(tmp_path: Path) -> None:
    cluster = CurrentCluster.from_kubeconfig(kubeconfig=kubeconfig(tmp_path, "gke_proj_zone_train"))
    archive = tmp_path / "image.tar"
    archive.write_bytes(b"")
    with pytest.raises(CurrentClusterError, match="set REGISTRY=host"):
        cluster.deliver(archive, "dtjob-operator", "0.2.0")


def test_localize_replaces_the_projects_images_in_every_container_and_leaves_others() -> None:
    refs = {"localhost/dtjob-trainer-torch:0.1.0": "r.example/dtjob-trainer-torch:0.1.0"}
    localized = localize(job("localhost/dtjob-trainer-torch:0.1.0", "busybox:1.36",
                             init="localhost/dtjob-trainer-torch:0.1.0"), refs)  # fmt: skip
    spec = localized["spec"]["replicas"][0]["template"]["spec"]
    assert [c["image"] for c in spec["containers"]] == ["r.example/dtjob-trainer-torch:0.1.0", "busybox:1.36"]
    assert spec["initContainers"][0]["image"] == "r.example/dtjob-trainer-torch:0.1.0"


def test_gke_gpus_become_the_accelerator_and_other_gpus_a_plain_limit() -> None:
    on_gke = {"spec": {"replicas": [{"template": {"spec": {"containers": [{"name": "t"}]}}}]}}
    Gpus("nvidia-l4", 1).wire(on_gke)
    assert on_gke["spec"]["accelerator"] == {"type": "nvidia-l4", "count": 1, "spot": False}
    assert "resources" not in on_gke["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    Gpus("nvidia-h100-80gb", 8, spot=True).wire(on_gke)  # Spot GPU pools: dtjob tolerates their taint
    assert on_gke["spec"]["accelerator"] == {"type": "nvidia-h100-80gb", "count": 1, "spot": True}

    for model in ("NVIDIA-A100-SXM4-40GB", None):  # GPU feature discovery's product label, or none
        elsewhere = {"spec": {"replicas": [{"template": {"spec": {"containers": [{"name": "t"}]}}}]}}
        Gpus(model, 2).wire(elsewhere)
        assert "accelerator" not in elsewhere["spec"]
        container = elsewhere["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}


def test_the_pinned_kubeconfig_is_a_private_copy_with_the_chosen_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = kubeconfig(tmp_path, "kind-dev", "gke-a")
    monkeypatch.setenv("KUBECONFIG", f"{original}:{tmp_path / 'other'}")
    pinned = pinned_kubeconfig("gke-a")
    assert yaml.safe_load(pinned.read_text())["current-context"] == "gke-a"
    assert pinned.stat().st_mode & 0o777 == 0o600
    assert yaml.safe_load(original.read_text())["current-context"] == "kind-dev"
    assert yaml.safe_load(pinned_kubeconfig(None).read_text())["current-context"] == "kind-dev"


@pytest.mark.parametrize("gpus", [None, Gpus("nvidia-l4", 1, spot=True), Gpus(None, 4)], ids=str)
def test_the_demos_job_for_a_cluster_of_yours_is_a_valid_job(gpus: Gpus | None) -> None:
    manifest = localize(yaml.safe_load(EXAMPLE.read_text()), {TORCH_TRAINER.ref: "r.example/t:1"})
    checkpoints_on(manifest, claim=None)
    if gpus:
        gpus.wire(manifest)
    spec = DistributedTrainingJobSpec.model_validate(manifest["spec"])
    assert spec.checkpoint is not None and spec.checkpoint.volume == {"emptyDir": {}}
    checkpoints_on(manifest, claim="filestore")
    assert manifest["spec"]["checkpoint"]["volume"] == {"persistentVolumeClaim": {"claimName": "filestore"}}
