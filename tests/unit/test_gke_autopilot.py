"""Golden tests: on GKE Autopilot the GPU pods take the shape of Google's Autopilot recipes.

tests/data/gke_recipes/autopilot.yaml records what each Autopilot recipe's pod changes against the
Standard one (sources, commits, date read); the Standard shape itself is golden-tested in
test_gke_recipes.py. Here an Autopilot pod must be dtjob's Standard pod with exactly those changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.frameworks import Gang
from dtjob.core.gke import Installer, choose, on_autopilot
from dtjob.core.names import JobRef
from dtjob.core.render import render_pod
from tests.support.builders import NOW, manifest
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
    gang = Gang.of(JobRef.of(stored), spec, 1, NcclProfileName(profile), autopilot=autopilot)
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
    assert chosen.reason.endswith(
        "in Autopilot's shape (its GPUDirect installers run in gpudirect-system, rdma-system)"
    )
    standard = choose(spec, EIGHT_RDMA, running)
    assert (standard.profile, standard.autopilot) == ("RDMA", False)


def test_machines_without_an_autopilot_recipe_keep_the_standard_shape() -> None:
    """A4X (no Autopilot manifest is published) and managed DRANET."""
    a4x = DistributedTrainingJobSpec.model_validate(job("nvidia-gb200", gpus=4)["spec"])
    chosen = choose(a4x, frozenset(f"rdma-{i}" for i in range(4)), autopilot=True)
    assert (chosen.profile, chosen.autopilot) == ("RDMA", False)
    assert "Autopilot" not in chosen.reason
    dranet = choose(a4x, frozenset(), device_classes=frozenset({"mrdma.google.com"}), autopilot=True)
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
