"""A TCPX(O) daemon must pair with the NCCL plugin the cluster's nccl-tcpx(o)-installer installs (GKE's
release notes pair them): where the installer's plugin version is known and the daemon the pods get is not
its pair, the network choice says so in a Warning, naming the daemon to set."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob.api import NcclProfileName
from dtjob.core.gke import Installer, daemon_mismatch
from dtjob.core.plan import Event
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
TCPX_MISMATCH = (
    f"the daemon {TCPX_REGISTRY}/tcpgpudmarxd-dev:v2.0.15 does not pair with the NCCL plugin v3.1.9 that "
    "the cluster's nccl-tcpx-installer installs: that plugin pairs with daemon v2.0.12 (GKE's TCPX release "
    "notes); set spec.nccl.daemonImage, or the chart's nccl.daemonImages.tcpx, to the daemon of that "
    "tag (docs/gke.md)"
)


@pytest.mark.parametrize(
    ("profile", "installers", "daemon", "said"),
    [
        pytest.param(TCPXO, installer("v1.0.15"), None, None, id="TCPXO: the profile's daemon with its own plugin"),
        pytest.param(TCPXO, installer("v1.0.14"), None, TCPXO_MISMATCH, id="TCPXO: the profile's daemon with an older plugin"),
        pytest.param(TCPXO, installer("v1.0.14"), f"{REGISTRY}/tcpgpudmarxd-dev:v1.0.20", None, id="TCPXO: the older plugin's daemon set"),
        pytest.param(TCPXO, installer("v1.0.99"), None, None, id="TCPXO: a plugin newer than dtjob knows: not judged"),
        pytest.param(TCPX, tcpx_installer("v3.1.12"), None, None, id="TCPX: the profile's daemon with its own plugin"),
        pytest.param(TCPX, tcpx_installer("v3.1.9"), None, TCPX_MISMATCH, id="TCPX: the profile's daemon with the older plugin"),
        pytest.param(TCPX, tcpx_installer("v3.1.9"), f"{TCPX_REGISTRY}/tcpgpudmarxd-dev:v2.0.12", None, id="TCPX: the older plugin's daemon set"),
        pytest.param(TCPX, tcpx_installer("v3.1.13"), None, None, id="TCPX: a plugin newer than dtjob knows: not judged"),
        pytest.param(TCPX, tcpx_installer("v3.1.8"), None, None, id="TCPX: a plugin older than the release notes: not judged"),
    ],
)  # fmt: skip
def test_a_daemon_pairs_with_the_installers_plugin_or_is_named(
    profile: NcclProfileName, installers: dict[str, Installer], daemon: str | None, said: str | None
) -> None:
    assert daemon_mismatch(profile, daemon, installers) == said


def test_a_profile_reads_only_its_own_installer_and_unread_installers_are_not_judged() -> None:
    assert daemon_mismatch(TCPX, None, installer("v1.0.14")) is None
    assert daemon_mismatch(TCPXO, None, tcpx_installer("v3.1.9")) is None
    assert (
        daemon_mismatch(NcclProfileName.RDMA, None, {**installer("v1.0.14"), **tcpx_installer("v3.1.9")})
        is None
    )
    assert daemon_mismatch(TCPXO, None, {}) is None
    assert daemon_mismatch(TCPX, None, {}) is None


def job(accelerator: dict[str, Any] = MEGA, **nccl: Any) -> dict[str, Any]:
    return manifest(("Worker", 2), accelerator=accelerator, nccl=nccl)


def test_a_pass_warns_once_an_attempt_when_the_daemon_does_not_pair() -> None:
    plan = plan_for(job(), [], NOW, networks=GKE_NETWORKS, installers=installer("v1.0.14"))
    assert plan.status is not None and plan.status["nccl"]["profile"] == "GPUDirectTCPXO"
    assert "; but the daemon " in plan.status["nccl"]["reason"]
    (event,) = [e for e in plan.events if e.reason == "NetworkChosen"]
    assert event == Event(
        "Warning", "NetworkChosen", f"attempt 1: NCCL profile GPUDirectTCPXO: {plan.status['nccl']['reason']}"
    )
    assert (
        len(plan.create) == 2
    )  # the pods start anyway: the pairing is Google's advice, not a check of the node


def test_the_operators_daemon_setting_counts_and_a_pair_is_quiet() -> None:
    paired = {TCPXO: f"{REGISTRY}/tcpgpudmarxd-dev:v1.0.20"}
    plan = plan_for(job(), [], NOW, networks=GKE_NETWORKS, installers=installer("v1.0.14"),
                     daemon_images=paired)  # fmt: skip
    assert [e.type for e in plan.events if e.reason == "NetworkChosen"] == ["Normal"]
    daemon = next(c for c in plan.create[0]["spec"]["initContainers"] if c["name"] == "tcpxo-daemon")
    assert daemon["image"].endswith(":v1.0.20")


def test_a_tcpx_installer_at_the_older_plugin_degrades_the_choice_and_names_the_fix() -> None:
    plan = plan_for(job(HIGH), [], NOW, networks=GKE_NETWORKS, installers=tcpx_installer("v3.1.9"))
    assert plan.status is not None and plan.status["nccl"]["profile"] == "GPUDirectTCPX"
    reason = plan.status["nccl"]["reason"]
    assert reason.endswith(f"; but {TCPX_MISMATCH}"), reason
    (event,) = [e for e in plan.events if e.reason == "NetworkChosen"]
    assert event == Event("Warning", "NetworkChosen", f"attempt 1: NCCL profile GPUDirectTCPX: {reason}")
    assert len(plan.create) == 2


def test_autopilots_tcpx_installer_pairs_with_the_autopilot_shapes_daemon() -> None:
    """Autopilot's installer (nccl-tcpx-installer-autopilot.yaml) installs v3.1.9, and Google's Autopilot
    recipe runs its pair v2.0.12: the Autopilot shape's default daemon, so no Warning."""
    installers = tcpx_installer("v3.1.9", "gpudirect-system")
    plan = plan_for(job(HIGH), [], NOW, networks=GKE_NETWORKS, installers=installers)
    assert plan.status is not None and plan.status["nccl"]["autopilot"] is True
    assert [e.type for e in plan.events if e.reason == "NetworkChosen"] == ["Normal"]
    daemon = next(c for c in plan.create[0]["spec"]["initContainers"] if c["name"] == "tcpx-daemon")
    assert daemon["image"] == f"{TCPX_REGISTRY}/tcpgpudmarxd-dev:v2.0.12"
    standard = {"nccl-tcpx-installer": Installer("kube-system", installers["nccl-tcpx-installer"].images)}
    assert daemon_mismatch(TCPX, None, standard, autopilot=True) is None
    assert daemon_mismatch(TCPX, None, standard) is not None


def test_a_tcpx_installer_at_the_profiles_plugin_is_quiet() -> None:
    plan = plan_for(job(HIGH), [], NOW, networks=GKE_NETWORKS, installers=tcpx_installer("v3.1.12"))
    assert plan.status is not None and plan.status["nccl"]["profile"] == "GPUDirectTCPX"
    assert [e.type for e in plan.events if e.reason == "NetworkChosen"] == ["Normal"]
