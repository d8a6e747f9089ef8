"""Golden tests: on GKE Autopilot the GPU pods take the shape of Google's Autopilot recipes.

tests/data/gke_recipes/autopilot.yaml records what each Autopilot recipe's pod changes against the
Standard one (sources, commits, date read); the Standard shape itself is golden-tested in
test_gke_recipes.py. Here an Autopilot pod must be dtjob's Standard pod with exactly those changes.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.frameworks import Gang
from dtjob.core.gke import (
    DAEMON_PAIRINGS,
    Installer,
    NetworkChoice,
    autopilot_cluster,
    autopilot_node,
    choose,
    on_autopilot,
    selects_autopilot,
    with_daemon,
)
from dtjob.core.names import JobRef
from dtjob.core.observed import node_essentials
from dtjob.core.render import render_pod
from tests.support.builders import NOW, manifest, template
from tests.support.plan import plan_for

AUTOPILOT = yaml.safe_load(
    (Path(__file__).parents[1] / "data" / "gke_recipes" / "autopilot.yaml").read_text()
)
EIGHT_RDMA = frozenset(f"rdma-{i}" for i in range(8))
EIGHT_VPC = frozenset(f"vpc{i}" for i in range(1, 9))
PROFILES = ["GPUDirectTCPX", "GPUDirectTCPXO", "RDMA"]


def job(accelerator: str, profile: str = "Auto", gpus: int = 8) -> dict[str, Any]:
    return manifest(
        ("Worker", 2), accelerator={"type": accelerator, "count": gpus}, nccl={"profile": profile}
    )


def accelerators(profile: str) -> list[str]:
    family = AUTOPILOT[profile]
    return family.get("accelerators") or [family["accelerator"]]


def pod(accelerator: str, profile: str, autopilot: bool) -> dict[str, Any]:
    stored = job(accelerator, profile)
    spec = DistributedTrainingJobSpec.model_validate(stored["spec"])
    gang = replace(Gang.of(JobRef.of(stored), spec, 1, NcclProfileName(profile)), autopilot=autopilot)
    return render_pod(gang, gang.members[0])


def installers(mode: str) -> dict[str, Installer]:
    return {
        name: Installer(namespace, ()) for name, namespace in AUTOPILOT["installer_namespaces"][mode].items()
    }


def host_mounts(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Mount path -> (host path, read-only), for the container's host-path mounts."""
    hosts = {v["name"]: v["hostPath"]["path"] for v in pod["spec"]["volumes"] if "hostPath" in v}
    return {
        m["mountPath"]: (hosts[m["name"]], bool(m.get("readOnly")))
        for m in container["volumeMounts"]
        if m["name"] in hosts
    }


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


@pytest.mark.parametrize(("profile", "accelerator"), [(p, a) for p in PROFILES for a in accelerators(p)])
def test_an_autopilot_pod_is_the_standard_pod_with_the_autopilot_recipes_changes(
    profile: str, accelerator: str
) -> None:
    want = AUTOPILOT[profile]
    standard, autopilot = pod(accelerator, profile, False), pod(accelerator, profile, True)

    annotations = {**standard["metadata"]["annotations"], **want["annotations_changed"]}
    got = autopilot["metadata"]["annotations"]
    assert set(got) == set(annotations)
    for key, value in annotations.items():
        assert (
            (json.loads(got[key]) == json.loads(value)) if key.endswith("/interfaces") else got[key] == value
        )

    trainer, standard_trainer = autopilot["spec"]["containers"][0], standard["spec"]["containers"][0]
    read_only = set(want["trainer"].get("read_only_mounts") or [])
    expected_mounts = {
        path: (host, path in read_only)
        for path, (host, _) in host_mounts(standard, standard_trainer).items()
        if path not in want["trainer"]["host_mounts_removed"]
    }
    assert host_mounts(autopilot, trainer) == expected_mounts
    assert env(trainer) == {
        k: v for k, v in env(standard_trainer).items() if k not in want["trainer"]["env_removed"]
    }

    if want["daemon"] is None:
        assert not [c for c in autopilot["spec"].get("initContainers") or [] if c["name"].endswith("-daemon")]
        return
    (daemon,) = [c for c in autopilot["spec"]["initContainers"] if c["name"] == want["daemon"]["name"]]
    (standard_daemon,) = [
        c for c in standard["spec"]["initContainers"] if c["name"] == want["daemon"]["name"]
    ]
    assert env(daemon) == {
        k: v for k, v in env(standard_daemon).items() if k not in want["daemon"]["env_removed"]
    }
    assert daemon.get("resources") == want["daemon"]["resources"]
    unchanged = ("image", "command", "args", "securityContext", "startupProbe", "restartPolicy")
    assert {k: daemon.get(k) for k in unchanged} == {k: standard_daemon.get(k) for k in unchanged}
    kept = want["daemon"]["host_mounts_removed"]
    assert host_mounts(autopilot, daemon) == {
        path: mount for path, mount in host_mounts(standard, standard_daemon).items() if path not in kept
    }
    if (socket := want.get("socket_volume")) is not None:
        (volume,) = [v for v in autopilot["spec"]["volumes"] if v["name"] == f"dtj-{socket['name']}"]
        assert volume == {"name": f"dtj-{socket['name']}", "emptyDir": socket["emptyDir"]}


@pytest.mark.parametrize("profile", ["GPUDirectTCPX", "GPUDirectTCPXO"])
def test_an_autopilot_pod_selects_and_runs_what_googles_autopilot_recipe_does(profile: str) -> None:
    """The recipe's node selectors (its zone aside, the job's own; spot as spec.accelerator.spot sets it),
    its daemon's image (the pair the pass chooses for the recipe's plugin) and its trainer's GPUs."""
    want = AUTOPILOT[profile]["recipe_pod"]
    stored = manifest(("Worker", 2), accelerator={"type": AUTOPILOT[profile]["accelerator"], "count": 8,
                                                  "spot": True}, nccl={"profile": profile})  # fmt: skip
    spec = DistributedTrainingJobSpec.model_validate(stored["spec"])
    pairing = DAEMON_PAIRINGS[NcclProfileName(profile)]
    plugin = f"registry/{pairing.plugin_image}:{want['plugin']}"
    installers = {pairing.installer: Installer("gpudirect-system", (plugin,))}
    chosen = with_daemon(spec, NetworkChoice(NcclProfileName(profile), "", autopilot=True), None, installers)
    gang = Gang.of(JobRef.of(stored), spec, 1, NcclProfileName(profile), chosen.daemon_image)
    gang = replace(gang, autopilot=True)
    rendered = render_pod(gang, gang.members[0])
    selectors = {k: v for k, v in want["nodeSelector"].items() if k != "topology.kubernetes.io/zone"}
    assert rendered["spec"]["nodeSelector"] == selectors
    (daemon,) = [c for c in rendered["spec"]["initContainers"] if c["name"].endswith("-daemon")]
    assert daemon["image"] == want["daemon_image"]
    trainer = rendered["spec"]["containers"][0]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == str(want["trainer_gpus"])
    standard = pod(AUTOPILOT[profile]["accelerator"], profile, False)
    assert "cloud.google.com/gke-gpu-driver-version" not in standard["spec"]["nodeSelector"]


def node(name: str, compute_class: str | None) -> dict[str, Any]:
    labels = {"cloud.google.com/compute-class": compute_class} if compute_class else {}
    return {"metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def test_autopilot_is_known_from_the_nodes_compute_classes() -> None:
    detection = AUTOPILOT["detection"]
    for compute_class in detection["autopilot_compute_classes"]:
        assert autopilot_node(node("n", compute_class))
    assert not autopilot_node(node("n", "my-standard-class")) and not autopilot_node(node("n", None))
    autopilot_nodes = [node("a", "autopilot"), node("b", "Accelerator")]
    assert autopilot_cluster(autopilot_nodes)
    # The operator's node cache keeps the label (and no other): the same answer from cached nodes.
    assert autopilot_cluster(map(node_essentials, autopilot_nodes))
    assert node_essentials(node("c", None))["metadata"].get("labels") is None
    # A Standard cluster's own node pool (no compute class), or Autopilot-mode nodes beside it: Standard.
    assert not autopilot_cluster([*autopilot_nodes, node("c", None)])
    assert not autopilot_cluster([])


def test_one_node_of_a_custom_compute_class_does_not_make_an_autopilot_cluster_standard() -> None:
    """On an Autopilot cluster a custom ComputeClass's nodes run in Autopilot mode too, labelled with that
    class; Autopilot's node names say what the label does not. Before, one such node made the cluster
    Standard, and its pods got what Autopilot refuses (GCS FUSE's "0" limits, host library mounts)."""
    prefix = AUTOPILOT["detection"]["node_name_prefix"]
    custom = node(f"{prefix}training-nap-a3-highgpu-8g-1a2b3c4d-x7k2", "my-h100-class")
    autopilot_nodes = [node(f"{prefix}training-pool-2-9f8e7d6c-q1w2", "autopilot"), custom]
    assert autopilot_node(custom) and autopilot_cluster(autopilot_nodes)
    assert autopilot_cluster(map(node_essentials, autopilot_nodes))  # the cache keeps the name
    # A Standard cluster's node of the same class: Standard.
    assert not autopilot_cluster([node("gke-training-a3-pool-1a2b3c4d-x7k2", "my-h100-class")])


def test_a_template_that_selects_an_autopilot_compute_class_runs_in_autopilot_mode() -> None:
    assert selects_autopilot({"nodeSelector": {"cloud.google.com/compute-class": "autopilot-spot"}})
    assert not selects_autopilot({"nodeSelector": {"cloud.google.com/compute-class": "my-class"}})
    assert not selects_autopilot({})


GCSFUSE_VOLUME = {"csi": {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "b"}}}
FORBIDDEN_ON_AUTOPILOT = re.compile(r"^gke-gcsfuse/.+-(limit|request)$")


def forbidden(pod: dict[str, Any]) -> list[str]:
    """What GKE Autopilot refuses in a pod, of what dtjob could write: a "0" sidecar size (the GCS FUSE
    driver's troubleshooting guide; tests/data/gke_recipes/gcsfuse.yaml), host namespaces, privilege."""
    spec, found = pod["spec"], []
    found += [k for k, v in pod["metadata"].get("annotations", {}).items()
              if FORBIDDEN_ON_AUTOPILOT.match(k) and v == "0"]  # fmt: skip
    found += [k for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    containers = [*spec.get("initContainers", []), *spec["containers"]]
    found += [c["name"] for c in containers if (c.get("securityContext") or {}).get("privileged")]
    return found


@pytest.mark.parametrize("accelerator", [None, "nvidia-tesla-a100", "nvidia-l4", "nvidia-h100-80gb"])
def test_on_an_autopilot_cluster_without_gpudirect_no_pod_gets_what_autopilot_forbids(
    accelerator: str | None,
) -> None:
    """An A100, L4 or H100 job on TCP (no GPUDirect installer, no Network objects), or a CPU job, with a
    Cloud Storage FUSE checkpoint volume: on Standard the sidecar is unlimited, on Autopilot it is not."""
    gpus = {"accelerator": {"type": accelerator, "count": 8 if accelerator == "nvidia-h100-80gb" else 1}}
    stored = manifest(("Worker", 2), **(gpus if accelerator else {}),
                      checkpoint={"volume": GCSFUSE_VOLUME, "path": "/ckpt"})  # fmt: skip
    for autopilot in (True, False):
        plan = plan_for(stored, [], NOW, networks=frozenset(), installers={}, autopilot=autopilot)
        assert len(plan.create) == 2
        found = [name for pod in plan.create for name in forbidden(pod)]
        assert (found == []) if autopilot else found, found


def test_a_standard_cluster_job_that_selects_autopilot_keeps_the_sidecar_limits() -> None:
    selects = template(nodeSelector={"cloud.google.com/compute-class": "autopilot"})
    stored = manifest({"role": "Worker", "count": 1, "template": selects},
                      checkpoint={"volume": GCSFUSE_VOLUME, "path": "/ckpt"})  # fmt: skip
    (created,) = plan_for(stored, [], NOW).create
    assert forbidden(created) == []


def test_the_installers_namespaces_say_autopilot() -> None:
    assert on_autopilot(installers("autopilot"))
    assert not on_autopilot(installers("standard"))
    assert not on_autopilot({}) and not on_autopilot(None)


def test_auto_on_autopilot_needs_gvnic_1_on_rdma_machines_and_says_the_shape() -> None:
    spec = DistributedTrainingJobSpec.model_validate(job("nvidia-b200")["spec"])
    running = frozenset(installers("autopilot"))
    lacking = choose(spec, EIGHT_RDMA, running, autopilot=True)
    assert lacking.profile == "TCP" and "gvnic-1" in lacking.reason and lacking.degraded
    chosen = choose(spec, EIGHT_RDMA | {"gvnic-1"}, running, autopilot=True)
    assert (chosen.profile, chosen.autopilot) == ("RDMA", True)
    assert chosen.reason.endswith("in Autopilot's shape (the pods run in GKE's Autopilot mode)")
    standard = choose(spec, EIGHT_RDMA, running)
    assert (standard.profile, standard.autopilot) == ("RDMA", False)


def test_machines_without_an_autopilot_recipe_keep_the_standard_shape() -> None:
    """A4X (no Autopilot manifest is published) and managed DRANET."""
    a4x = DistributedTrainingJobSpec.model_validate(job("nvidia-gb200", gpus=4)["spec"])
    chosen = choose(a4x, frozenset(f"rdma-{i}" for i in range(4)), autopilot=True)
    assert (chosen.profile, chosen.autopilot) == ("RDMA", False)
    assert "Autopilot" not in chosen.reason
    dranet = choose(a4x, frozenset(), device_classes=frozenset({"mrdma.google.com"}), autopilot=True,
                    dranet_accelerators=frozenset({"nvidia-gb200"}))  # fmt: skip
    assert (dranet.profile, dranet.autopilot) == ("ManagedRDMA", False)


def test_a_pass_records_the_autopilot_shape_and_later_passes_render_it() -> None:
    stored = job("nvidia-h100-mega-80gb")
    plan = plan_for(stored, [], NOW, networks=EIGHT_VPC, installers=installers("autopilot"))  # fmt: skip
    status = plan.status or {}
    assert status["nccl"]["profile"] == "GPUDirectTCPXO" and status["nccl"]["autopilot"] is True
    assert "Autopilot" in status["nccl"]["reason"]
    (daemon,) = [c for c in plan.create[0]["spec"]["initContainers"] if c["name"] == "tcpxo-daemon"]
    assert "LD_LIBRARY_PATH" not in env(daemon)
    # A pass that creates the pods later in the attempt (an operator stopped before it created them)
    # reads no cluster facts again: the shape is the recorded one.
    recorded = {k: v for k, v in status.items() if k != "createdAttempt"}
    later = plan_for({**stored, "status": recorded}, [], NOW)
    (daemon,) = [c for c in later.create[0]["spec"]["initContainers"] if c["name"] == "tcpxo-daemon"]
    assert "LD_LIBRARY_PATH" not in env(daemon)
    standard = plan_for(stored, [], NOW, networks=EIGHT_VPC, installers=installers("standard"))  # fmt: skip
    assert "autopilot" not in (standard.status or {})["nccl"]
