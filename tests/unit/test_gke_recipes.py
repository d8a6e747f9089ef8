"""Golden tests: each GPUDirect profile renders what Google's published GKE recipe puts in its pod.

The recipes' facts are test data (tests/data/gke_recipes/*.yaml, each with its source files, commits and
the date read), so a newer recipe is a diff there, and this test names every fact dtjob then differs on.
Where dtjob departs from a recipe on purpose, DEPARTURES says so and why; nothing else may differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.gke import DAEMON_PAIRINGS, NCCL_FALLBACK_PREFIX, PROFILES, choose
from dtjob.core.render import SHM_VOLUME, render_children
from tests.support.builders import container, manifest, pods_of, template

RECIPES = Path(__file__).parents[1] / "data" / "gke_recipes"


class Family(NamedTuple):
    recipe: str
    accelerator: str
    profile: str
    gpus: int = 8


FAMILIES = {
    "GPUDirectTCPX": Family("gpudirect-tcpx.yaml", "nvidia-h100-80gb", "GPUDirectTCPX"),
    "GPUDirectTCPXO": Family("gpudirect-tcpxo.yaml", "nvidia-h100-mega-80gb", "GPUDirectTCPXO"),
    "RDMA": Family("rdma.yaml", "nvidia-h200-141gb", "RDMA"),
    "RDMA A4X": Family("rdma-a4x.yaml", "nvidia-gb200", "RDMA", gpus=4),
    "ManagedRDMA A4X": Family("rdma-dranet.yaml", "nvidia-gb200", "ManagedRDMA", gpus=4),
}

# Where dtjob's pod differs from the recipe's on purpose (documented in docs/gke.md).
DEPARTURES = {
    # The recipes run their daemon as a plain container; a training pod must complete when training ends,
    # so dtjob runs it as a native sidecar (an init container with restartPolicy Always).
    "daemon kind": "native sidecar",
    # TCPX: the recipe mounts the daemon's socket directory over the trainer's /tmp; dtjob mounts it at
    # /run/tcpx and says so with NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX, leaving the trainer its /tmp.
    "tcpx socket in the trainer": "/run/tcpx",
    # TCPXO's daemon startup probe allows 60 s, not the best-practice example's 30 s: "typically takes ~
    # 30s" is a typical start, and a slower one must not cost a restart of the daemon.
    "startup probe failureThreshold": 12,
    # The device plugin already shows the pod its 8 GPUs; NCCL_DEBUG is spec.nccl.debug's.
    "env not set": {"CUDA_VISIBLE_DEVICES", "NCCL_DEBUG"},
    # Set by dtjob beyond the recipe's lists: the socket prefix above; where the installer's env script
    # is, which the trainer runtime applies at start (the recipes source it in their shell); NCCL_LIB_DIR,
    # which the TCPXO README asks workloads to set; for RDMA, the bootstrap on the pod network, which the
    # gpu-recipes override after the script (to "eth0,eth1": their pods attach gvnic-1 on eth1, dtjob's
    # do not). The gIB tuning is the script's: dtjob's copy is only a fallback (below).
    "env added": {
        "GPUDirectTCPX": {"NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": "/run/tcpx"},
        "GPUDirectTCPXO": {
            "NCCL_LIB_DIR": "/usr/local/nvidia/lib64",
            "DTJ_NCCL_ENV_SCRIPT": "/usr/local/nvidia/lib64/nccl-env-profile.sh",
        },
        "RDMA": {
            "NCCL_SOCKET_IFNAME": "eth0",
            "DTJ_NCCL_ENV_SCRIPT": "/usr/local/gib/scripts/set_nccl_env.sh",
        },
        "RDMA A4X": {
            "NCCL_SOCKET_IFNAME": "eth0",
            "DTJ_NCCL_ENV_SCRIPT": "/usr/local/gib/scripts/set_nccl_env.sh",
        },
        "ManagedRDMA A4X": {
            "NCCL_SOCKET_IFNAME": "eth0",
            "DTJ_NCCL_ENV_SCRIPT": "/usr/local/gib/scripts/set_nccl_env.sh",
        },
    },
    # Managed DRANET: the toolkit's node pool applies one default-rdma template per cluster; dtjob applies
    # one per job, which the job owns (it works in any namespace and goes with the job), under its own names.
    "dranet names": {"template": "mnist-gpu-nics", "request": "gpu-nics", "claim": "dtj-gpu-nics"},
}


def recipe(family: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((RECIPES / FAMILIES[family].recipe).read_text())
    return loaded


def rendered(family: str) -> dict[str, Any]:
    machine = FAMILIES[family]
    job = manifest(
        ("Worker", 2),
        accelerator={"type": machine.accelerator, "count": machine.gpus},
        nccl={"profile": machine.profile},
    )
    return pods_of(job)["mnist-worker-0"]


def host_paths(volumes: Any) -> dict[str, str | None]:
    """Volume name -> host path (None for any other kind), from a pod's list or a recipe's mapping."""
    if isinstance(volumes, dict):
        return {
            n: v.get("hostPath") if isinstance(v.get("hostPath"), str) else None for n, v in volumes.items()
        }
    return {v["name"]: (v.get("hostPath") or {}).get("path") for v in volumes}


def mounted_host_paths(mounts: Any, volumes: dict[str, str | None]) -> dict[str, str]:
    """Mount path -> host path, for the host-path volumes among `mounts` (a list, or name -> path)."""
    pairs = mounts.items() if isinstance(mounts, dict) else [(m["name"], m["mountPath"]) for m in mounts]
    return {path: host for name, path in pairs if (host := volumes.get(name))}


def trainer_env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("profile", FAMILIES)
def test_the_pod_annotations_are_the_recipes(profile: str) -> None:
    want, got = recipe(profile)["annotations"], rendered(profile)["metadata"]["annotations"]
    assert set(got) == set(want)
    for key, value in want.items():
        if key == "networking.gke.io/interfaces":
            assert json.loads(got[key]) == json.loads(value)  # the recipes write it over several lines
        elif key.startswith("devices.gke.io/"):
            assert yaml.safe_load(got[key]) == yaml.safe_load(value), key  # GKE reads it as YAML
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("profile", ["GPUDirectTCPX", "GPUDirectTCPXO"])
def test_the_receive_daemon_is_the_recipes(profile: str) -> None:
    want, pod = recipe(profile)["sidecar"], rendered(profile)
    (daemon,) = [c for c in pod["spec"]["initContainers"] if c["name"] == want["name"]]
    expected_image = recipe(profile).get("release", {}).get("newest_upstream_stored", {}).get("daemon")
    # TCPXO: the newest daemon upstream's own README lists (the fork's newer pair is not Google's).
    assert daemon["image"] == (
        want["image"] if expected_image is None else f"{want['image'].rsplit('/', 1)[0]}/{expected_image}"
    )
    assert [*daemon["command"], *(daemon.get("args") or [])] == [*want["command"], *(want.get("args") or [])]
    assert daemon["securityContext"] == want["securityContext"]
    readiness = recipe(profile).get("sidecar_startup_probe") or {"env": {}}
    assert {e["name"]: e["value"] for e in daemon["env"]} == {**want["env"], **readiness["env"]}
    if "startupProbe" in readiness:
        probe = {
            **readiness["startupProbe"],
            "failureThreshold": DEPARTURES["startup probe failureThreshold"],
        }
        assert daemon["startupProbe"] == probe
    else:
        assert "startupProbe" not in daemon  # none published for this daemon
    volumes = host_paths(pod["spec"]["volumes"])
    assert mounted_host_paths(daemon["volumeMounts"], volumes) == mounted_host_paths(
        want["volumeMounts"], host_paths(recipe(profile)["volumes"])
    )
    assert daemon["restartPolicy"] == "Always" and not want["native_sidecar"], DEPARTURES["daemon kind"]


@pytest.mark.parametrize("profile", FAMILIES)
def test_the_trainer_mounts_the_recipes_host_paths_and_shared_memory(profile: str) -> None:
    want, pod = recipe(profile), rendered(profile)
    trainer = pod["spec"]["containers"][0]
    expected = mounted_host_paths(want["trainer"]["volumeMounts"], host_paths(want["volumes"]))
    if profile == "GPUDirectTCPX":
        assert expected.pop("/tmp") == "/run/tcpx"
        expected[DEPARTURES["tcpx socket in the trainer"]] = "/run/tcpx"
    assert mounted_host_paths(trainer["volumeMounts"], host_paths(pod["spec"]["volumes"])) == expected
    if "shared-memory" in want["volumes"]:  # spec.sharedMemory gives every pod a memory-backed /dev/shm
        assert {"name": SHM_VOLUME, "mountPath": "/dev/shm"} in trainer["volumeMounts"]


@pytest.mark.parametrize("profile", FAMILIES)
def test_the_trainer_env_is_the_recipes_and_its_library_path_comes_first(profile: str) -> None:
    want, env = recipe(profile), trainer_env(rendered(profile))
    listed = dict(want.get("nccl_env_release_notes") or want.get("nccl_env_profile") or {})
    # The TCPXO README names the lib directory of its own test image and asks to replace it by the one
    # the workload sees; the recipe's pods see it at /usr/local/nvidia/lib64.
    listed = {k: v.replace("/usr/local/tcpxo/lib64", "/usr/local/nvidia/lib64") for k, v in listed.items()}
    listed.pop("LD_LIBRARY_PATH", None)
    expected = {**listed, **{k: v for k, v in want["trainer"]["env"].items() if k != "LD_LIBRARY_PATH"}}
    expected = {k: v for k, v in expected.items() if k not in DEPARTURES["env not set"]}
    expected |= DEPARTURES["env added"][profile]
    injected = {
        k: v
        for k, v in env.items()
        if k.startswith(("NCCL_", "DTJ_NCCL_")) and not k.startswith(NCCL_FALLBACK_PREFIX)
    }
    assert {k: env.get(k) for k in expected} == expected
    assert set(injected) - {"NCCL_DEBUG"} == set(expected)
    first = want.get("trainer_library_path") or [want["trainer"]["env"]["LD_LIBRARY_PATH"]]
    assert env["LD_LIBRARY_PATH"].split(":")[: len(first)] == first


def test_the_tcpxo_env_has_what_the_guest_config_checker_enforces() -> None:
    """The plugin aborts a workload without it (README, 2025-08-21 on)."""
    required = recipe("GPUDirectTCPXO")["nccl_env_profile_rules"]["required_by_guest_config_checker"]
    env = trainer_env(rendered("GPUDirectTCPXO"))
    assert {k: env.get(k) for k in required} == required


@pytest.mark.parametrize("profile", ["RDMA", "RDMA A4X", "ManagedRDMA A4X"])
def test_the_gib_pod_names_the_nodes_script_and_sets_only_the_recipes_overrides(profile: str) -> None:
    """The recipes source set_nccl_env.sh, then override the tuner config and the socket interfaces: the
    pod names the script for the runtime and sets those plainly (they stay over the script's values)."""
    sourcing, env = recipe("RDMA")["set_nccl_env"], trainer_env(rendered(profile))
    assert env["DTJ_NCCL_ENV_SCRIPT"] == sourcing["script"]
    assert env["NCCL_NET"] == sourcing["set_before_sourcing"]["NCCL_NET"]
    assert env["NCCL_SOCKET_IFNAME"] == DEPARTURES["env added"][profile]["NCCL_SOCKET_IFNAME"]
    overridden = set(sourcing["overrides_after_sourcing"])
    tuned = {k for k in env if k.startswith("NCCL_")} - {"NCCL_DEBUG"} - set(sourcing["set_before_sourcing"])
    assert tuned <= overridden  # nothing of the script's own tuning is set plainly
    if profile == "RDMA":
        assert tuned == overridden


def test_the_gib_tuning_is_a_fallback_the_runtime_applies_only_without_the_script() -> None:
    """What set_nccl_env.sh exported at gIB v1.1.0, under names NCCL does not read (on A3 Ultra and A4
    only: none is published for A4X)."""
    fallback = {
        k.removeprefix(NCCL_FALLBACK_PREFIX): v
        for k, v in trainer_env(rendered("RDMA")).items()
        if k.startswith(NCCL_FALLBACK_PREFIX)
    }
    assert fallback == recipe("RDMA")["nccl_env_fallback"]
    assert not set(fallback) & set(trainer_env(rendered("RDMA")))
    for a4x in ("RDMA A4X", "ManagedRDMA A4X"):
        assert not [k for k in trainer_env(rendered(a4x)) if k.startswith(NCCL_FALLBACK_PREFIX)], a4x


def test_each_rdma_machine_gets_its_own_gib_tuner_config() -> None:
    for accelerator, path in recipe("RDMA")["tuner_config_by_accelerator"].items():  # A3 Ultra, A4
        job = manifest(("Worker", 2), accelerator={"type": accelerator, "count": 8}, nccl={"profile": "RDMA"})
        assert trainer_env(pods_of(job)["mnist-worker-0"])["NCCL_TUNER_CONFIG_PATH"] == path, accelerator


@pytest.mark.parametrize("profile", FAMILIES)
def test_gloo_uses_the_pod_network_beside_the_gpu_nics(profile: str) -> None:
    # Google's recipes set it (GKE's verl tutorial, gpu-recipes, cluster-toolkit: eth0, the pod network).
    assert trainer_env(rendered(profile))["GLOO_SOCKET_IFNAME"] == "eth0"


def test_an_a4x_pod_holds_its_four_gpus_tolerates_arm_nodes_and_gets_no_unpublished_tuning() -> None:
    want, pod = recipe("RDMA A4X"), rendered("RDMA A4X")
    trainer = pod["spec"]["containers"][0]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == str(want["gpus_per_machine"])
    assert all(t in pod["spec"]["tolerations"] for t in want["tolerations"])
    env = trainer_env(pod)
    assert "NCCL_TUNER_CONFIG_PATH" not in env and "NCCL_IB_TC" not in env
    assert f"{NCCL_FALLBACK_PREFIX}NCCL_IB_TC" not in env


def test_auto_takes_rdma_on_a4x_only_with_all_four_gpus_and_its_four_networks() -> None:
    spec = DistributedTrainingJobSpec.model_validate(
        manifest(("Worker", 2), accelerator={"type": "nvidia-gb200", "count": 4})["spec"]
    )
    chosen = choose(spec, frozenset(f"rdma-{i}" for i in range(4)))
    assert chosen.profile == "RDMA", chosen.reason
    assert chosen.reason == "2 pods of 4 nvidia-gb200 GPUs, Networks rdma-0..rdma-3 present"
    eight = DistributedTrainingJobSpec.model_validate(
        manifest(("Worker", 2), accelerator={"type": "nvidia-gb200", "count": 8})["spec"]
    )
    assert choose(eight, frozenset(f"rdma-{i}" for i in range(8))).profile == "TCP"


def test_an_a4x_template_keeps_its_compute_domain_claim() -> None:
    """Multi-node NVLink: the template adds the ComputeDomain's channel claim itself (docs/gke.md)."""
    claim = recipe("RDMA A4X")["compute_domain_claim"]
    trainer = container(resources={"claims": claim["container_claims"]})
    job = manifest(
        {
            "role": "Worker",
            "count": 2,
            "template": template(trainer, resourceClaims=claim["pod_resourceClaims"]),
        },
        accelerator={"type": "nvidia-gb200", "count": 4},
        nccl={"profile": "RDMA"},
    )
    pod = pods_of(job)["mnist-worker-0"]
    assert pod["spec"]["resourceClaims"] == claim["pod_resourceClaims"]
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["claims"] == claim["container_claims"] and resources["limits"]["nvidia.com/gpu"] == "4"


def test_a_managed_rdma_pod_claims_all_its_nodes_nics_as_the_toolkit_does() -> None:
    want, names = recipe("ManagedRDMA A4X")["dranet"], DEPARTURES["dranet names"]
    job = manifest(
        ("Worker", 2), accelerator={"type": "nvidia-gb200", "count": 4}, nccl={"profile": "ManagedRDMA"}
    )
    (claims,) = [c for c in render_children(job, attempt=1) if c["kind"] == "ResourceClaimTemplate"]
    assert claims["metadata"]["name"] == names["template"]
    (theirs,) = want["claim_template"]["requests"]
    assert claims["spec"]["spec"]["devices"]["requests"] == [{**theirs, "name": names["request"]}]
    pod = pods_of(job)["mnist-worker-0"]
    (their_claim,) = want["pod_resourceClaims"]
    assert pod["spec"]["resourceClaims"] == [
        {**their_claim, "name": names["claim"], "resourceClaimTemplateName": names["template"]}
    ]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": names["claim"]}]
    assert all(t in pod["spec"]["tolerations"] for t in recipe("ManagedRDMA A4X")["tolerations"])


@pytest.mark.parametrize(
    ("profile", "releases"), [("GPUDirectTCPX", "tcpx_releases"), ("GPUDirectTCPXO", "tcpxo_releases")]
)
def test_the_daemon_pairs_with_the_plugin_each_release_names(profile: str, releases: str) -> None:
    want, pairing = recipe(profile), DAEMON_PAIRINGS[NcclProfileName(profile)]
    assert {r["plugin"]: r["daemon"] for r in want[releases]} == pairing.daemon_for_plugin
    # The profile's own daemon is the newest upstream release's.
    assert PROFILES[NcclProfileName(profile)].sidecars[0]["image"].endswith(":" + want[releases][0]["daemon"])
    # The plugin version is read where Google's manifests put it: the installer DaemonSet's plugin image.
    assert want["installer"]["daemonset"] == pairing.installer
    assert want["installer"]["image"].rsplit("/", 1)[1].split(":")[0] == pairing.plugin_image
