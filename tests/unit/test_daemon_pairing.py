"""A TCPX(O) daemon must pair with the NCCL plugin the cluster's nccl-tcpx(o)-installer installs (GKE's
release notes pair them). dtjob runs the pair of the installed plugin (recorded in status.nccl.daemonImage
for the attempt); a daemon set by the job or the operator is taken as set, with a Warning when it does not
pair; a plugin the pairs do not list sends Auto to TCP, with a Warning naming the versions."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob.api import DistributedTrainingJobSpec, JobStatus, NcclProfileName
from dtjob.core.gke import Installer, NetworkChoice, with_daemon
from dtjob.core.network import attempt_network
from dtjob.core.plan import Event
from dtjob.core.world import GkeFacts
from tests.support.builders import GKE_NETWORKS, NOW, manifest
from tests.support.plan import plan_for

REGISTRY = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo"
TCPX_REGISTRY = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx"
TCPXO = NcclProfileName.GPUDIRECT_TCPXO
TCPX = NcclProfileName.GPUDIRECT_TCPX
MEGA = {"type": "nvidia-h100-mega-80gb", "count": 8}
HIGH = {"type": "nvidia-h100-80gb", "count": 8}
INJECTOR = Installer("kube-system", ("registry.k8s.io/nri-device-injector:v0.0.1",))


def installer(plugin: str) -> dict[str, Installer]:
    """The DaemonSet as container-engine-accelerators' manifest has it: an ubuntu pre-installation step,
    the plugin's installer, a pause container."""
    images = (
        "ubuntu",
        f"{REGISTRY}/nccl-plugin-gpudirecttcpx-dev:{plugin}",
        "gke.gcr.io/pause:3.8@sha256:880e63f9",
    )
    return {"nccl-tcpxo-installer": Installer("kube-system", images), "device-injector": INJECTOR}


def tcpx_installer(plugin: str, namespace: str = "kube-system") -> dict[str, Installer]:
    """nccl-tcpx-installer as container-engine-accelerators' manifests have it (Standard: kube-system,
    Autopilot: gpudirect-system): the plugin's installer, a pause container."""
    images = (
        f"{TCPX_REGISTRY}/nccl-plugin-gpudirecttcpx-dev:{plugin}",
        "gke.gcr.io/pause:3.8@sha256:880e63f9",
    )
    return {"nccl-tcpx-installer": Installer(namespace, images), "device-injector": INJECTOR}


TCPXO_MISMATCH = (
    f"the daemon {REGISTRY}/tcpgpudmarxd-dev:v1.0.21 does not pair with the NCCL plugin v1.0.14 that the "
    "cluster's nccl-tcpxo-installer installs: that plugin pairs with daemon v1.0.20 (GKE's TCPXO release "
    "notes); set spec.nccl.daemonImage, or the chart's nccl.daemonImages.tcpxo, to the daemon of that "
    "tag (docs/gke.md)"
)
TCPX_UNKNOWN = (
    "the cluster's nccl-tcpx-installer installs the NCCL plugin {}, which GKE's TCPX release notes as "
    "dtjob knows them do not list (v3.1.12, v3.1.9): no daemon is known to pair with it; set "
    "spec.nccl.daemonImage, or the chart's nccl.daemonImages.tcpx, to the daemon of its release (docs/gke.md)"
)
CHOSEN = {
    TCPXO: NetworkChoice(TCPXO, "2 pods of 8 nvidia-h100-mega-80gb GPUs, Networks vpc1..vpc8 present"),
    TCPX: NetworkChoice(TCPX, "2 pods of 8 nvidia-h100-80gb GPUs, Networks vpc1..vpc4 present"),
}


def tcpxo_daemon(tag: str) -> str:
    return f"{REGISTRY}/tcpgpudmarxd-dev:{tag}"


def tcpx_daemon(tag: str) -> str:
    return f"{TCPX_REGISTRY}/tcpgpudmarxd-dev:{tag}"


@pytest.mark.parametrize(
    ("profile", "installers", "explicit", "daemon", "said", "degraded"),
    [
        pytest.param(TCPXO, installer("v1.0.15"), None, tcpxo_daemon("v1.0.21"), "", False, id="TCPXO: the profile's own pair"),
        pytest.param(TCPXO, installer("v1.0.14"), None, tcpxo_daemon("v1.0.20"),
                     "; daemon v1.0.20, the pair of the NCCL plugin v1.0.14 that the cluster's nccl-tcpxo-installer installs",
                     False, id="TCPXO: Cluster Toolkit's older plugin gets its pair"),
        pytest.param(TCPXO, installer("v1.0.14"), tcpxo_daemon("v1.0.20"), tcpxo_daemon("v1.0.20"), "", False,
                     id="TCPXO: the older plugin's daemon set"),
        pytest.param(TCPXO, installer("v1.0.14"), tcpxo_daemon("v1.0.21"), tcpxo_daemon("v1.0.21"), f"; but {TCPXO_MISMATCH}",
                     True, id="TCPXO: a daemon set that does not pair: taken, and said"),
        pytest.param(TCPXO, installer("v1.0.99"), tcpxo_daemon("v1.0.30"), tcpxo_daemon("v1.0.30"), "", False,
                     id="TCPXO: a plugin dtjob does not know with a daemon set: taken"),
        pytest.param(TCPX, tcpx_installer("v3.1.12"), None, tcpx_daemon("v2.0.15"), "", False, id="TCPX: the profile's own pair"),
        pytest.param(TCPX, tcpx_installer("v3.1.9"), None, tcpx_daemon("v2.0.12"),
                     "; daemon v2.0.12, the pair of the NCCL plugin v3.1.9 that the cluster's nccl-tcpx-installer installs",
                     False, id="TCPX: Cluster Toolkit's older plugin gets its pair"),
        pytest.param(TCPX, {}, None, tcpx_daemon("v2.0.15"), "", False, id="TCPX: no installer seen: the profile's"),
        pytest.param(TCPX, None, None, tcpx_daemon("v2.0.15"), "", False, id="TCPX: installers unread: the profile's"),
        pytest.param(TCPX, installer("v1.0.14"), None, tcpx_daemon("v2.0.15"), "", False,
                     id="TCPX: only its own installer is read"),
    ],
)  # fmt: skip
def test_the_daemon_is_the_installed_plugins_pair_or_the_one_set(
    profile: NcclProfileName,
    installers: dict[str, Installer] | None,
    explicit: str | None,
    daemon: str,
    said: str,
    degraded: bool,
) -> None:
    job = spec(HIGH if profile == TCPX else MEGA)
    chosen = with_daemon(job, CHOSEN[profile], explicit, installers)
    assert chosen.profile == profile and chosen.daemon_image == daemon
    assert chosen.reason == CHOSEN[profile].reason + said
    assert chosen.degraded is degraded


@pytest.mark.parametrize(
    "plugin", ["v3.1.13", "v3.1.8"], ids=["newer than dtjob knows", "older than the notes"]
)
def test_a_plugin_the_pairs_do_not_list_sends_auto_to_tcp_and_keeps_an_explicit_profiles_daemon(
    plugin: str,
) -> None:
    fallen = with_daemon(spec(HIGH), CHOSEN[TCPX], None, tcpx_installer(plugin))
    assert fallen == NetworkChoice(
        NcclProfileName.TCP,
        f"TCP instead of GPUDirectTCPX on nvidia-h100-80gb: {TCPX_UNKNOWN.format(plugin)}",
        degraded=True,
    )
    explicit = spec(HIGH, profile="GPUDirectTCPX")
    kept = with_daemon(explicit, CHOSEN[TCPX], None, tcpx_installer(plugin))
    assert kept.profile == TCPX and kept.daemon_image == tcpx_daemon("v2.0.15") and kept.degraded
    assert kept.reason.endswith(f"; but {TCPX_UNKNOWN.format(plugin)}")


def test_profiles_without_a_daemon_are_left_as_chosen() -> None:
    rdma = NetworkChoice(NcclProfileName.RDMA, "RDMA")
    assert with_daemon(spec(HIGH), rdma, None, {**installer("v1.0.14"), **tcpx_installer("v3.1.9")}) == rdma


def spec(accelerator: dict[str, Any], **nccl: Any) -> DistributedTrainingJobSpec:
    return DistributedTrainingJobSpec.model_validate(job(accelerator, **nccl)["spec"])


def job(accelerator: dict[str, Any] = MEGA, **nccl: Any) -> dict[str, Any]:
    return manifest(("Worker", 2), accelerator=accelerator, nccl=nccl)


def daemon_of(pod: dict[str, Any], name: str) -> str:
    return str(next(c for c in pod["spec"]["initContainers"] if c["name"] == name)["image"])


def test_a_cluster_toolkit_a3_mega_gets_the_paired_daemon_recorded_for_the_attempt() -> None:
    """Cluster Toolkit installs the TCPXO plugin v1.0.14: its pods run daemon v1.0.20, not dtjob's
    v1.0.21; the attempt keeps that daemon when the installer is upgraded under it."""
    plan = plan_for(job(), [], NOW, networks=GKE_NETWORKS, installers=installer("v1.0.14"))
    assert plan.status is not None and plan.status["nccl"]["daemonImage"] == tcpxo_daemon("v1.0.20")
    (event,) = [e for e in plan.events if e.reason == "NetworkChosen"]
    assert event.type == "Normal" and "daemon v1.0.20, the pair of the NCCL plugin v1.0.14" in event.message
    assert {daemon_of(p, "tcpxo-daemon") for p in plan.create} == {tcpxo_daemon("v1.0.20")}

    # The installer upgraded under the attempt: its pods (a replacement too) keep the recorded daemon.
    old = JobStatus.model_validate(plan.status)
    upgraded = GkeFacts(GKE_NETWORKS, frozenset(), installer("v1.0.15"))
    again = attempt_network(spec(MEGA), old, upgraded)
    assert not isinstance(again, str) and again.daemon_image == tcpxo_daemon("v1.0.20")
    # A record from before status.nccl kept the daemon: the one set, else the profile's.
    unrecorded = old.model_copy(update={"nccl": old.nccl.model_copy(update={"daemon_image": None})})
    assert attempt_network(spec(MEGA), unrecorded, upgraded).daemon_image is None  # type: ignore[union-attr]


def test_the_operators_daemon_setting_counts_and_a_pair_is_quiet() -> None:
    paired = {TCPXO: tcpxo_daemon("v1.0.20")}
    plan = plan_for(job(), [], NOW, networks=GKE_NETWORKS, installers=installer("v1.0.14"),
                     daemon_images=paired)  # fmt: skip
    assert [e.type for e in plan.events if e.reason == "NetworkChosen"] == ["Normal"]
    assert daemon_of(plan.create[0], "tcpxo-daemon") == tcpxo_daemon("v1.0.20")


@pytest.mark.parametrize(
    ("nccl", "operators", "daemon"),
    [
        pytest.param({}, {}, tcpxo_daemon("v1.0.21"), id="the profile's"),
        pytest.param({}, {TCPXO: "registry/tcpxo-daemon:operator"}, "registry/tcpxo-daemon:operator", id="the operator's"),
        pytest.param({"daemonImage": "registry/tcpxo-daemon:job"}, {TCPXO: "registry/tcpxo-daemon:operator"},
                     "registry/tcpxo-daemon:job", id="the job's wins"),
    ],
)  # fmt: skip
def test_the_daemon_comes_from_the_job_else_the_operator_else_the_profile(
    nccl: dict[str, Any], operators: dict[NcclProfileName, str], daemon: str
) -> None:
    stored = job(profile="GPUDirectTCPXO", **nccl)
    plan = plan_for(stored, [], NOW, networks=GKE_NETWORKS, installers={}, daemon_images=operators)
    assert plan.status is not None and plan.status["nccl"]["daemonImage"] == daemon
    assert {daemon_of(p, "tcpxo-daemon") for p in plan.create} == {daemon}


def test_a_daemon_set_that_does_not_pair_runs_with_a_warning() -> None:
    plan = plan_for(job(daemonImage=tcpxo_daemon("v1.0.21")), [], NOW, networks=GKE_NETWORKS,
                    installers=installer("v1.0.14"))  # fmt: skip
    assert plan.status is not None and plan.status["nccl"]["reason"].endswith(f"; but {TCPXO_MISMATCH}")
    (event,) = [e for e in plan.events if e.reason == "NetworkChosen"]
    assert event == Event(
        "Warning", "NetworkChosen", f"attempt 1: NCCL profile GPUDirectTCPXO: {plan.status['nccl']['reason']}"
    )
    assert {daemon_of(p, "tcpxo-daemon") for p in plan.create} == {tcpxo_daemon("v1.0.21")}


def test_autopilots_tcpx_installer_gets_its_pair_in_the_autopilot_shape() -> None:
    """Autopilot's installer (nccl-tcpx-installer-autopilot.yaml) installed v3.1.9 at 4aeee0d7, whose
    recipe ran v2.0.12, and v3.1.12 at 98c85a6e, whose recipe runs v2.0.15: each gets its pair."""
    for plugin, daemon in (("v3.1.9", "v2.0.12"), ("v3.1.12", "v2.0.15")):
        installers = tcpx_installer(plugin, "gpudirect-system")
        plan = plan_for(job(HIGH), [], NOW, networks=GKE_NETWORKS, installers=installers)
        assert plan.status is not None and plan.status["nccl"]["autopilot"] is True
        assert [e.type for e in plan.events if e.reason == "NetworkChosen"] == ["Normal"]
        assert daemon_of(plan.create[0], "tcpx-daemon") == tcpx_daemon(daemon)


def test_an_unknown_tcpx_plugin_sends_auto_to_tcp_with_a_warning_naming_it() -> None:
    plan = plan_for(job(HIGH), [], NOW, networks=GKE_NETWORKS, installers=tcpx_installer("v3.1.13"))
    assert plan.status is not None and plan.status["nccl"]["profile"] == "TCP"
    (event,) = [e for e in plan.events if e.reason == "NetworkChosen"]
    assert event.type == "Warning" and TCPX_UNKNOWN.format("v3.1.13") in event.message
    assert all(
        "tcpx-daemon" not in [c["name"] for c in p["spec"].get("initContainers", [])] for p in plan.create
    )
