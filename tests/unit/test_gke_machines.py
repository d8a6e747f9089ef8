"""Golden test: every GKE GPU machine family, as Google's sources describe it (tests/data/gke_recipes/
machines.yaml), is one dtjob knows: which network Auto gives it and how many GPUs make a whole machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.gke import MACHINES, choose, nccl_env
from tests.support.builders import GKE_NETWORKS, manifest, template

DATA: dict[str, Any] = yaml.safe_load(
    (Path(__file__).parents[1] / "data" / "gke_recipes" / "machines.yaml").read_text()
)
FAMILIES: dict[str, Any] = DATA["families"]
PROFILE_OF_NETWORK = {
    "GPUDirect-TCPX": "GPUDirectTCPX",
    "GPUDirect-TCPXO": "GPUDirectTCPXO",
    "GPUDirect RDMA": "RDMA",
}


def machine_types(family: str) -> list[dict[str, Any]]:
    return list(FAMILIES[family]["machine_types"].values())


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_gets_its_gpu_network_on_its_whole_machine_and_tcp_elsewhere(family: str) -> None:
    network = FAMILIES[family]["network"]
    whole = max(m["gpus"] for m in machine_types(family))
    for machine_type in machine_types(family):
        accelerator = machine_type["accelerator"]
        if network is None:
            assert accelerator not in MACHINES, f"{family} has no GPU-to-GPU network, {accelerator}"
        else:
            known = MACHINES[accelerator]
            assert (known.profile, known.gpus) == (PROFILE_OF_NETWORK[network], whole), family
        spec = DistributedTrainingJobSpec.model_validate(
            manifest(("Worker", 2), accelerator={"type": accelerator, "count": machine_type["gpus"]})["spec"]
        )
        chosen = choose(spec, frozenset())  # no Networks: a GPUDirect machine falls back, saying why
        assert chosen.profile == "TCP", family
        if network is None:
            assert chosen.reason == f"{accelerator} machines have no GPUDirect network"
            assert not chosen.degraded
        else:
            assert chosen.reason.startswith(f"TCP instead of {PROFILE_OF_NETWORK[network]} on {accelerator}")


def test_every_machine_dtjob_knows_is_in_googles_table() -> None:
    listed = {m["accelerator"] for family in FAMILIES for m in machine_types(family)}
    assert set(MACHINES) <= listed


@pytest.mark.parametrize(
    ("family", "machine_type"), [("A3 Edge", "a3-edgegpu-8g"), ("A4", "a4-highgpu-8g-lowmem")]
)
def test_a_variant_that_shares_its_label_gets_that_labels_profile_whatever_machine_type_the_pods_select(
    family: str, machine_type: str
) -> None:
    """dtjob reads the accelerator label alone: a job pinned to A3 Edge or A4 lowmem by the machine-type label
    gets A3 High's or A4's profile (docs/gke.md)."""
    listed = FAMILIES[family]["machine_types"][machine_type]
    pinned = template(nodeSelector={"node.kubernetes.io/instance-type": machine_type})
    spec = DistributedTrainingJobSpec.model_validate(
        manifest(
            {"role": "Worker", "count": 2, "template": pinned},
            accelerator={"type": listed["accelerator"], "count": listed["gpus"]},
        )["spec"]
    )
    chosen = choose(spec, GKE_NETWORKS)
    assert (chosen.profile, chosen.degraded) == (PROFILE_OF_NETWORK[FAMILIES[family]["network"]], False), (
        chosen
    )


@pytest.mark.parametrize(("gpus", "level"), DATA["g4_p2p_level"].items())
def test_g4_pods_get_cluster_toolkits_p2p_level_and_the_jobs_own_wins(gpus: int, level: str) -> None:
    g4 = {"type": "nvidia-rtx-pro-6000", "count": gpus}
    spec = DistributedTrainingJobSpec.model_validate(manifest(("Worker", 2), accelerator=g4)["spec"])
    assert dict(nccl_env(spec, NcclProfileName.TCP))["NCCL_P2P_LEVEL"] == level
    own = manifest(("Worker", 2), accelerator=g4, nccl={"env": [{"name": "NCCL_P2P_LEVEL", "value": "NVL"}]})
    assert (
        dict(nccl_env(DistributedTrainingJobSpec.model_validate(own["spec"]), NcclProfileName.TCP))[
            "NCCL_P2P_LEVEL"
        ]
        == "NVL"
    )
    h100 = manifest(("Worker", 2), accelerator={"type": "nvidia-h100-80gb", "count": gpus})
    assert "NCCL_P2P_LEVEL" not in dict(
        nccl_env(DistributedTrainingJobSpec.model_validate(h100["spec"]), NcclProfileName.TCP)
    )
