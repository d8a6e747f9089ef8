"""The TCPXO daemon must pair with the NCCL plugin the cluster's nccl-tcpxo-installer installs (GKE's
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
TCPXO = NcclProfileName.GPUDIRECT_TCPXO
MEGA = {"type": "nvidia-h100-mega-80gb", "count": 8}


def installer(plugin: str) -> dict[str, Installer]:
    """The DaemonSet as container-engine-accelerators' manifest has it: an ubuntu pre-installation step,
    the plugin's installer, a pause container."""
    images = (
        "ubuntu",
        f"{REGISTRY}/nccl-plugin-gpudirecttcpx-dev:{plugin}",
        "gke.gcr.io/pause:3.8@sha256:880e63f9",
    )
    return {
        "nccl-tcpxo-installer": Installer("kube-system", images),
        "device-injector": Installer("kube-system", ("registry.k8s.io/nri-device-injector:v0.0.1",)),
    }


@pytest.mark.parametrize(
    ("plugin", "daemon", "pairs"),
    [
        pytest.param("v1.0.15", None, True, id="the profile's daemon with its own plugin"),
        pytest.param("v1.0.14", None, False, id="the profile's daemon with an older plugin"),
        pytest.param("v1.0.14", f"{REGISTRY}/tcpgpudmarxd-dev:v1.0.20", True, id="the older plugin's daemon set"),
        pytest.param("v1.0.99", None, True, id="a plugin newer than dtjob knows: not judged"),
    ],
)  # fmt: skip
def test_a_daemon_pairs_with_the_installers_plugin_or_is_named(
    plugin: str, daemon: str | None, pairs: bool
) -> None:
    mismatch = daemon_mismatch(TCPXO, daemon, installer(plugin))
    assert (mismatch is None) == pairs, mismatch
    if not pairs:
        assert mismatch == (
            f"the daemon {REGISTRY}/tcpgpudmarxd-dev:v1.0.21 does not pair with the NCCL plugin v1.0.14 that the "
            "cluster's nccl-tcpxo-installer installs: that plugin pairs with daemon v1.0.20 (GKE's TCPXO release "
            "notes); set spec.nccl.daemonImage, or the chart's nccl.daemonImages.tcpxo, to the daemon of that "
            "tag (docs/gke.md)"
        )


def test_other_profiles_and_unread_installers_are_not_judged() -> None:
    assert daemon_mismatch(NcclProfileName.GPUDIRECT_TCPX, None, installer("v1.0.14")) is None
    assert daemon_mismatch(TCPXO, None, {}) is None


def job(**nccl: Any) -> dict[str, Any]:
    return manifest(("Worker", 2), accelerator=MEGA, nccl=nccl)


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
