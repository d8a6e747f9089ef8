"""The GKE examples (examples/gke/) render as docs/gke.md says: they need a GKE cluster to run, so this
test checks what dtjob makes of them; tests/integration/test_gke_networks.py applies them to a real API
server with --dry-run=server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dtjob.core.render.accelerator import FLEX_START_TOLERATION
from tests.support.builders import GKE_NETWORKS, NOW, UID
from tests.support.plan import plan_for

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "gke").glob("*.yaml"))
# The large-model examples, on the machines that GPUDirect networking serves.
LLM_EXAMPLES = [p for p in EXAMPLES if p.stem.startswith("llm-")]
GCSFUSE = yaml.safe_load((Path(__file__).parents[1] / "data" / "gke_recipes" / "gcsfuse.yaml").read_text())
# Where the examples' checkpoint mount options depart from Google's checkpointing list: the trainer runtime
# replaces its `latest` pointer in place, so a stat cached for ever (-1) could show a pod that outlives a
# save (an elastic survivor) an older checkpoint, perhaps one already pruned (docs/gke.md).
MOUNT_OPTION_DEPARTURES = {"metadata-cache:ttl-secs:-1": "metadata-cache:ttl-secs:0"}


def stored(path: Path) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(path.read_text())
    job["metadata"] |= {"namespace": "team-a", "uid": UID, "generation": 1}
    return job


@pytest.mark.parametrize("example", LLM_EXAMPLES, ids=lambda p: p.stem)
def test_on_a_cluster_with_the_networks_the_gang_gets_gpudirect_gcs_fuse_and_its_nodes(
    example: Path,
) -> None:
    job = stored(example)
    plan = plan_for(job, [], NOW, networks=GKE_NETWORKS)
    assert plan.status is not None and plan.status["nccl"]["profile"].startswith(("GPUDirect", "RDMA"))
    accelerator = job["spec"]["accelerator"]
    assert len(plan.create) == job["spec"]["replicas"][0]["count"]
    for pod in plan.create:
        assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
        sidecar = {
            k: v for k, v in pod["metadata"]["annotations"].items() if k.endswith(("-limit", "-request"))
        }
        assert sidecar == GCSFUSE["sidecar"]["training_recipes_limits"]
        assert "networking.gke.io/interfaces" in pod["metadata"]["annotations"]
        selector = {"cloud.google.com/gke-accelerator": accelerator["type"]}
        if "placementGroup" in accelerator:
            selector["cloud.google.com/gke-placement-group"] = accelerator["placementGroup"]
        if accelerator.get("spot"):
            selector["cloud.google.com/gke-spot"] = "true"
        assert pod["spec"]["nodeSelector"] == selector


def test_the_a4x_example_holds_its_four_gpus_on_arm_nodes_with_its_compute_domain_claim() -> None:
    job = stored(next(p for p in EXAMPLES if p.stem == "llm-a4x"))
    plan = plan_for(job, [], NOW, networks=GKE_NETWORKS)
    assert plan.status is not None and plan.status["nccl"]["profile"] == "RDMA"
    for pod in plan.create:
        trainer = pod["spec"]["containers"][0]
        assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert trainer["resources"]["claims"] == [{"name": "compute-domain-channel"}]
        assert {
            "key": "kubernetes.io/arch",
            "operator": "Equal",
            "value": "arm64",
            "effect": "NoSchedule",
        } in pod["spec"]["tolerations"]
        assert '"network":"rdma-3"' in pod["metadata"]["annotations"]["networking.gke.io/interfaces"]
        assert '"rdma-4"' not in pod["metadata"]["annotations"]["networking.gke.io/interfaces"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_without_the_networks_auto_runs_it_over_tcp_or_holds_it_where_it_may_not_fall_back(
    example: Path,
) -> None:
    job = stored(example)
    plan = plan_for(job, [], NOW, networks=frozenset())
    assert plan.status is not None
    if (job["spec"].get("nccl") or {}).get("networkFallback") == "Never":
        assert plan.status["phase"] == "Invalid" and not plan.create
        return
    assert plan.status["nccl"]["profile"] == "TCP"
    assert all("networking.gke.io/interfaces" not in p["metadata"]["annotations"] for p in plan.create)


def test_the_a4x_example_claims_its_nics_on_a_cluster_with_managed_dranet_beside_its_channel() -> None:
    job = stored(next(p for p in EXAMPLES if p.stem == "llm-a4x"))
    plan = plan_for(job, [], NOW, networks=frozenset(), device_classes=frozenset({"mrdma.google.com"}),
                    dranet_accelerators=frozenset({"nvidia-gb200"}))  # fmt: skip
    assert plan.status is not None and plan.status["nccl"]["profile"] == "ManagedRDMA"
    assert [o["kind"] for o in plan.apply] == ["Service", "ResourceClaimTemplate"]
    for pod in plan.create:
        assert [c["name"] for c in pod["spec"]["resourceClaims"]] == [
            "compute-domain-channel",
            "dtj-gpu-nics",
        ]
        claims = pod["spec"]["containers"][0]["resources"]["claims"]
        assert claims == [{"name": "compute-domain-channel"}, {"name": "dtj-gpu-nics"}]
        assert "networking.gke.io/interfaces" not in pod["metadata"]["annotations"]


def test_the_flex_start_example_selects_and_tolerates_flex_start_nodes_over_tcp() -> None:
    job = stored(next(p for p in EXAMPLES if p.stem == "flex-start-l4"))
    plan = plan_for(job, [], NOW, networks=GKE_NETWORKS)
    assert plan.status is not None and plan.status["nccl"]["profile"] == "TCP"  # L4: no GPUDirect
    assert len(plan.create) == 2
    for pod in plan.create:
        assert pod["spec"]["nodeSelector"] == {
            "cloud.google.com/gke-accelerator": "nvidia-l4",
            "cloud.google.com/gke-flex-start": "true",
        }
        assert FLEX_START_TOLERATION in pod["spec"]["tolerations"]  # its literal: test_desired.py
        assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_examples_checkpoint_bucket_is_mounted_with_googles_checkpointing_options(example: Path) -> None:
    attributes = stored(example)["spec"]["checkpoint"]["volume"]["csi"]["volumeAttributes"]
    expected = [MOUNT_OPTION_DEPARTURES.get(o, o) for o in GCSFUSE["checkpointing_mount_options"]]
    assert attributes["mountOptions"].split(",") == expected
