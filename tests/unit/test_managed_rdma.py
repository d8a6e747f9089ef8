"""RDMA through GKE's managed DRANET (ManagedRDMA): on RDMA machines whose cluster has no rdma-N Network
objects but the DeviceClass mrdma.google.com and nodes of the machine labelled as running GKE's DRANET
driver, Auto claims each pod's GPU NICs through DRA (the DeviceClass alone, which GKE installs on every
recent cluster, is not enough); the pods claim
from a ResourceClaimTemplate the job owns, applied with the pods; an explicit ManagedRDMA without the
DeviceClass is Invalid."""

from __future__ import annotations

from typing import Any

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.gke import (
    GIB_TUNING,
    MANAGED_RDMA_DEVICE_CLASS,
    NCCL_FALLBACK_PREFIX,
    Installer,
    choose,
    nccl_env,
    needs_networks,
)
from dtjob.core.preflight import PREFLIGHT_CONTAINER
from dtjob.core.render import GPU_NIC_CLAIM, render_children, trainer_container
from tests.support.builders import GKE_NETWORKS, NOW, manifest
from tests.support.plan import invalid_for_now, needs_for, plan_for

B200 = {"type": "nvidia-b200", "count": 8}
DRANET = frozenset({MANAGED_RDMA_DEVICE_CLASS, "gpu.nvidia.com"})
RDMA_INSTALLERS = {"nccl-rdma-installer": Installer("kube-system", ())}
RDMA_INSTALLER = frozenset(RDMA_INSTALLERS)
RDMA_NETWORKS = frozenset(f"rdma-{i}" for i in range(8))
B200_NODES = frozenset({"nvidia-b200"})  # the accelerator types of the nodes labelled DRANET's


def spec(**fields: Any) -> DistributedTrainingJobSpec:
    return DistributedTrainingJobSpec.model_validate(
        manifest(("Worker", 2), accelerator=B200, **fields)["spec"]
    )


def test_auto_claims_the_nics_from_dranet_where_the_rdma_networks_are_missing() -> None:
    choice = choose(spec(), frozenset(), RDMA_INSTALLER, DRANET, dranet_accelerators=B200_NODES)
    assert (choice.profile, choice.reason, choice.degraded) == (
        NcclProfileName.MANAGED_RDMA,
        "2 pods of 8 nvidia-b200 GPUs, their NICs claimed from GKE's managed DRANET (DeviceClass mrdma.google.com)",
        False,
    )


def test_auto_prefers_the_networks_where_both_exist_and_falls_back_to_tcp_naming_both_where_neither() -> None:
    both = choose(spec(), RDMA_NETWORKS, RDMA_INSTALLER, DRANET, dranet_accelerators=B200_NODES)
    assert both.profile == NcclProfileName.RDMA
    neither = choose(
        spec(), frozenset(), RDMA_INSTALLER, frozenset({"gpu.nvidia.com"}), dranet_accelerators=B200_NODES
    )
    assert neither.profile == NcclProfileName.TCP and neither.degraded
    assert neither.reason == (
        "TCP instead of RDMA on nvidia-b200: the cluster lacks the Network objects (networking.gke.io) "
        "rdma-0, rdma-1, rdma-2, rdma-3, rdma-4, rdma-5, rdma-6, rdma-7 that its interfaces attach to nor "
        "GKE's managed DRANET (the DeviceClass mrdma.google.com and nvidia-b200 nodes labelled "
        "cloud.google.com/gke-networking-dra-driver=true) (see docs/gke.md)"
    )


def test_the_device_class_alone_is_not_dranet_nor_are_other_machines_nodes() -> None:
    """GKE installs its networking DeviceClasses on every cluster from 1.34.1-gke.1829001: without nodes
    of the job's machines labelled as running the DRANET driver, the pods' claims could never be served
    (Pending for good); Auto falls back to TCP, saying what is missing."""
    for nodes in (frozenset(), frozenset({"nvidia-h200-141gb"})):
        choice = choose(spec(), frozenset(), RDMA_INSTALLER, DRANET, dranet_accelerators=nodes)
        assert choice.profile == NcclProfileName.TCP and choice.degraded
        assert "nvidia-b200 nodes labelled cloud.google.com/gke-networking-dra-driver=true" in choice.reason


def test_managed_rdma_still_needs_the_gib_installer() -> None:
    choice = choose(spec(), frozenset(), frozenset(), DRANET, dranet_accelerators=B200_NODES)
    assert choice.profile == NcclProfileName.TCP and choice.degraded
    assert "no DaemonSet nccl-rdma-installer (the NCCL plugin's installer)" in choice.reason


def test_a_tcpx_machine_does_not_take_dranet_for_its_networks() -> None:
    h100 = DistributedTrainingJobSpec.model_validate(
        manifest(("Worker", 2), accelerator={"type": "nvidia-h100-80gb", "count": 8})["spec"]
    )
    assert choose(h100, frozenset(), None, DRANET).profile == NcclProfileName.TCP


def test_the_pods_claim_the_nics_from_the_jobs_template_and_attach_no_networks() -> None:
    job = manifest(("Worker", 2), accelerator=B200, nccl={"profile": "ManagedRDMA"})
    children = render_children(job, attempt=1)
    assert [c["kind"] for c in children] == ["Service", "ResourceClaimTemplate", "Pod", "Pod"]
    template = children[1]
    assert template["apiVersion"] == "resource.k8s.io/v1"
    assert template["metadata"]["name"] == "mnist-gpu-nics"
    assert template["metadata"]["ownerReferences"][0]["kind"] == "DistributedTrainingJob"
    assert template["spec"] == {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu-nics",
                        "exactly": {"deviceClassName": "mrdma.google.com", "allocationMode": "All"},
                    }
                ]
            }
        }
    }
    for pod in children[2:]:
        assert pod["spec"]["resourceClaims"] == [
            {"name": GPU_NIC_CLAIM, "resourceClaimTemplateName": "mnist-gpu-nics"}
        ]
        assert trainer_container(pod["spec"])["resources"]["claims"] == [{"name": GPU_NIC_CLAIM}]
        assert pod["metadata"]["annotations"] == {"networking.gke.io/default-interface": "eth0"}
        mounts = {m["mountPath"] for m in trainer_container(pod["spec"])["volumeMounts"]}
        assert {"/usr/local/nvidia", "/usr/local/gib"} <= mounts


def test_the_template_claims_of_an_a4x_pod_are_kept_beside_the_nics() -> None:
    job = manifest(
        ("Worker", 2), accelerator={"type": "nvidia-gb200", "count": 4}, nccl={"profile": "ManagedRDMA"}
    )
    template = job["spec"]["replicas"][0]["template"]
    channel = {"name": "compute-domain-channel", "resourceClaimTemplateName": "domain-channel"}
    template["spec"]["resourceClaims"] = [channel]
    template["spec"]["containers"][0]["resources"] = {"claims": [{"name": "compute-domain-channel"}]}
    pod = render_children(job, attempt=1)[-1]
    assert pod["spec"]["resourceClaims"] == [
        channel, {"name": GPU_NIC_CLAIM, "resourceClaimTemplateName": "mnist-gpu-nics"}
    ]  # fmt: skip
    assert trainer_container(pod["spec"])["resources"]["claims"] == [
        {"name": "compute-domain-channel"}, {"name": GPU_NIC_CLAIM}
    ]  # fmt: skip


def test_the_preflight_uses_the_claim_too() -> None:
    job = manifest(
        ("Worker", 2), accelerator=B200, nccl={"profile": "ManagedRDMA", "preflight": {"enabled": True}}
    )
    pod = render_children(job, attempt=1)[-1]
    preflight = next(c for c in pod["spec"]["initContainers"] if c["name"] == PREFLIGHT_CONTAINER)
    assert {"name": GPU_NIC_CLAIM} in preflight["resources"]["claims"]


def test_managed_rdma_gets_the_gib_script_its_fallback_tuning_and_gloo_on_the_pod_network() -> None:
    env = dict(nccl_env(spec(), NcclProfileName.MANAGED_RDMA))
    assert env["NCCL_NET"] == "gIB" and env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["DTJ_NCCL_ENV_SCRIPT"] == "/usr/local/gib/scripts/set_nccl_env.sh"
    assert {(f"{NCCL_FALLBACK_PREFIX}{k}", v) for k, v in GIB_TUNING} <= set(env.items())
    assert env["NCCL_TUNER_CONFIG_PATH"] == "/usr/local/gib/configs/tuner_config_a4.txtpb"


def test_a_pass_applies_the_template_with_the_pods_and_only_then() -> None:
    job = manifest(("Worker", 2), accelerator=B200)
    assert needs_networks(DistributedTrainingJobSpec.model_validate(job["spec"]))
    plan = plan_for(job, [], NOW, networks=frozenset(), installers=RDMA_INSTALLERS, device_classes=DRANET,
                    dranet_accelerators=B200_NODES)  # fmt: skip
    assert plan.status is not None and plan.status["nccl"]["profile"] == "ManagedRDMA"
    assert [o["kind"] for o in plan.apply] == ["Service", "ResourceClaimTemplate"]
    assert len(plan.create) == 2
    rdma = plan_for(job, [], NOW, networks=GKE_NETWORKS, installers=RDMA_INSTALLERS, device_classes=DRANET)
    assert [o["kind"] for o in rdma.apply] == ["Service"]


def test_an_explicit_managed_rdma_without_the_device_class_is_invalid_until_it_exists() -> None:
    job = manifest(("Worker", 2), accelerator=B200, nccl={"profile": "ManagedRDMA"})
    assert needs_for(job, [], NOW).networks
    plan = plan_for(job, [], NOW, networks=GKE_NETWORKS, device_classes=frozenset())
    assert invalid_for_now(plan).startswith(
        "spec.nccl.profile: ManagedRDMA claims each pod's GPU NICs from the DRA DeviceClass mrdma.google.com, "
        "which this cluster lacks"
    )
    later = plan_for({**job, "status": plan.status}, [], NOW, networks=frozenset(), device_classes=DRANET)
    assert later.status is not None and later.status["phase"] != "Invalid" and len(later.create) == 2
