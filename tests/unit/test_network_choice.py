"""Auto's network choice: GPUDirect only where it can work (a whole machine per pod, more than one GPU
pod, the cluster's Network objects and GKE's installer DaemonSets present), else TCP with the reason; kept
per attempt in status.nccl."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.gke import NetworkChoice, choose
from dtjob.core.names import ATTEMPT_LABEL
from dtjob.core.plan import Event
from dtjob.core.world import Needs
from tests.support.builders import GKE_NETWORKS, NOW, manifest, pods_of, preempted, running
from tests.support.plan import after, invalid_for_now, needs_for, plan_for

H100 = {"type": "nvidia-h100-80gb", "count": 8}
TCPX_NETWORKS = frozenset({"vpc1", "vpc2", "vpc3", "vpc4"})


def spec(*replicas: tuple[str, int], **fields: Any) -> DistributedTrainingJobSpec:
    return DistributedTrainingJobSpec.model_validate(manifest(*replicas, **fields)["spec"])


@pytest.mark.parametrize(
    ("job", "networks", "profile", "reason"),
    [
        pytest.param(spec(("Worker", 2), accelerator=H100), TCPX_NETWORKS, "GPUDirectTCPX",
                     "2 pods of 8 nvidia-h100-80gb GPUs, Networks vpc1..vpc4 present", id="A3 High, 2 full pods, networks: TCPX"),
        pytest.param(spec(("Master", 1), ("Worker", 3), accelerator={"type": "nvidia-h200-141gb", "count": 8}),
                     GKE_NETWORKS, "RDMA", "4 pods of 8 nvidia-h200-141gb GPUs, Networks rdma-0..rdma-7 present",
                     id="A3 Ultra, 4 full pods: RDMA"),
        pytest.param(spec(("Worker", 2), accelerator=H100), frozenset({"vpc1", "vpc2"}), "TCP",
                     "TCP instead of GPUDirectTCPX on nvidia-h100-80gb: the cluster lacks the Network objects "
                     "(networking.gke.io) vpc3, vpc4 that its interfaces attach to (see docs/gke.md)",
                     id="networks missing: TCP, naming them"),
        pytest.param(spec(("Worker", 2), accelerator={**H100, "count": 4}), TCPX_NETWORKS, "TCP",
                     "TCP instead of GPUDirectTCPX on nvidia-h100-80gb: each pod asks for 4 GPUs, GPUDirect needs "
                     "the whole machine (8, accelerator.count)", id="half a machine per pod: TCP"),
        pytest.param(spec(("Worker", 1), accelerator=H100), TCPX_NETWORKS, "TCP",
                     "TCP instead of GPUDirectTCPX on nvidia-h100-80gb: 1 GPU pod, whose GPUs talk over NVLink "
                     "without a network", id="one pod: TCP"),
        pytest.param(spec(("Chief", 1), ("PS", 2), framework="TensorFlow", accelerator=H100), TCPX_NETWORKS, "TCP",
                     "TCP instead of GPUDirectTCPX on nvidia-h100-80gb: 1 GPU pod, whose GPUs talk over NVLink "
                     "without a network", id="parameter servers hold no GPUs: one GPU pod"),
        pytest.param(spec(("Worker", 2), accelerator={"type": "nvidia-l4", "count": 8}), GKE_NETWORKS, "TCP",
                     "nvidia-l4 machines have no GPUDirect network", id="an L4: TCP"),
        pytest.param(spec(("Worker", 2)), GKE_NETWORKS, "TCP", "no accelerator: no GPU network to set up",
                     id="no accelerator"),
        pytest.param(spec(("Worker", 1), accelerator=H100, nccl={"profile": "GPUDirectTCPXO"}), frozenset(),
                     "GPUDirectTCPXO", "spec.nccl.profile is GPUDirectTCPXO", id="an explicit profile is taken as it is"),
    ],
)  # fmt: skip
def test_auto_decision_table(
    job: DistributedTrainingJobSpec, networks: frozenset[str], profile: str, reason: str
) -> None:
    assert choose(job, networks) == NetworkChoice(
        NcclProfileName(profile), reason, degraded="lacks the Network objects" in reason
    )


def two_h100_pods(**fields: Any) -> dict[str, Any]:
    return manifest(("Worker", 2), accelerator=H100, **fields)


def test_a_pass_asks_for_the_networks_once_an_attempt_records_the_choice_and_warns_about_a_fallback() -> None:
    job = two_h100_pods()
    assert needs_for(job, [], NOW) == Needs(networks=True)  # nothing is decided without them

    plan = plan_for(job, [], NOW, networks=frozenset())
    assert plan.status is not None and plan.status["nccl"]["profile"] == "TCP"
    assert (
        plan.status["nccl"]["attempt"] == 1 and "lacks the Network objects" in plan.status["nccl"]["reason"]
    )
    assert [e for e in plan.events if e.reason == "NetworkChosen"] == [
        Event("Warning", "NetworkChosen", f"attempt 1: NCCL profile TCP: {plan.status['nccl']['reason']}")
    ]
    created = {pod["metadata"]["name"]: pod for pod in plan.create}
    assert "networking.gke.io/interfaces" not in (
        created["mnist-worker-0"]["metadata"].get("annotations") or {}
    )

    # The next pass of the same attempt keeps the choice without reading the networks again.
    again = plan_for({**job, "status": plan.status}, [running(p) for p in pods_of(job).values()], NOW)
    assert again.status is None or again.status["nccl"] == plan.status["nccl"]
    assert not [e for e in again.events if e.reason == "NetworkChosen"]


def test_with_the_networks_the_pods_get_gpudirect_and_a_normal_event() -> None:
    plan = plan_for(two_h100_pods(), [], NOW, networks=TCPX_NETWORKS)
    assert plan.status is not None and plan.status["nccl"]["profile"] == "GPUDirectTCPX"
    assert [e.type for e in plan.events if e.reason == "NetworkChosen"] == ["Normal"]
    pod = next(p for p in plan.create if p["metadata"]["name"] == "mnist-worker-0")
    assert "tcpx-daemon" in [c["name"] for c in pod["spec"]["initContainers"]]
    assert "devices.gke.io/container.tcpx-daemon" in pod["metadata"]["annotations"]


def test_a_new_attempt_chooses_again() -> None:
    first = plan_for(two_h100_pods(), [], NOW, networks=frozenset())
    assert first.status is not None
    restarted = {**first.status, "attempt": 2}
    assert needs_for({**two_h100_pods(), "status": restarted}, [], NOW).networks
    plan = plan_for({**two_h100_pods(), "status": restarted}, [], NOW, networks=TCPX_NETWORKS)
    assert plan.status is not None and plan.status["nccl"] == {
        "attempt": 2, "profile": "GPUDirectTCPX", "reason": "2 pods of 8 nvidia-h100-80gb GPUs, Networks vpc1..vpc4 present",
        "daemonImage": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.15",
    }  # fmt: skip


def test_an_explicit_profile_without_its_networks_is_invalid_naming_them_and_recovers_once_they_exist() -> (
    None
):
    job = two_h100_pods(nccl={"profile": "GPUDirectTCPXO"})
    plan = plan_for(job, [], NOW, networks=frozenset({"vpc1", "vpc2"}))
    assert invalid_for_now(plan).startswith(  # an admin may create them: looked for again soon
        "spec.nccl.profile: GPUDirectTCPXO attaches each pod to the GKE Network objects (networking.gke.io/v1) "
        "vpc3, vpc4, vpc5, vpc6, vpc7, vpc8, which this cluster lacks"
    )
    later = plan_for({**job, "status": plan.status}, [], NOW, networks=GKE_NETWORKS)
    assert later.status is not None and later.status["phase"] != "Invalid" and len(later.create) == 2


def test_auto_under_network_fallback_never_waits_invalid_for_the_networks_instead_of_running_over_tcp() -> (
    None
):
    job = two_h100_pods(nccl={"networkFallback": "Never"})
    plan = plan_for(job, [], NOW, networks=frozenset({"vpc1", "vpc2"}))
    assert invalid_for_now(plan).startswith(
        "spec.nccl.networkFallback is Never, and profile Auto would fall back: TCP instead of GPUDirectTCPX "
        "on nvidia-h100-80gb: the cluster lacks the Network objects (networking.gke.io) vpc3, vpc4"
    )
    later = plan_for({**job, "status": plan.status}, [], NOW, networks=TCPX_NETWORKS)
    assert later.status is not None and later.status["nccl"]["profile"] == "GPUDirectTCPX"
    assert len(later.create) == 2
    # A gang GPUDirect would not help is no fallback: it runs over TCP under Never too.
    half = manifest(("Worker", 2), accelerator={**H100, "count": 4}, nccl={"networkFallback": "Never"})
    plan = plan_for(half, [], NOW, networks=frozenset())
    assert plan.status is not None and plan.status["nccl"]["profile"] == "TCP" and len(plan.create) == 2
    # And the default falls back, as before.
    plan = plan_for(two_h100_pods(), [], NOW, networks=frozenset({"vpc1", "vpc2"}))
    assert plan.status is not None and plan.status["nccl"]["profile"] == "TCP" and len(plan.create) == 2


def test_under_never_a_restart_after_the_networks_went_waits_invalid_then_resumes_on_gpudirect() -> None:
    """Each attempt chooses again: attempt 2 of a gang that trained over GPUDirectTCPX, restarted once
    vpc3 and vpc4 are gone, creates no pods over TCP; it starts over GPUDirect once they are back."""
    job = two_h100_pods(nccl={"networkFallback": "Never"})
    first = plan_for(job, [], NOW, networks=TCPX_NETWORKS)
    job = after(job, first)
    assert job["status"]["nccl"]["profile"] == "GPUDirectTCPX"
    pods = pods_of(job)
    evicted = [running(pods["mnist-worker-0"]), preempted(pods["mnist-worker-1"])]
    job = after(job, plan_for(job, evicted, NOW + timedelta(seconds=1), networks=TCPX_NETWORKS))
    assert job["status"]["attempt"] == 2
    gone = plan_for(job, [], NOW + timedelta(seconds=2), networks=frozenset({"vpc1", "vpc2"}))
    assert invalid_for_now(gone).startswith(
        "spec.nccl.networkFallback is Never, and profile Auto would fall back"
    )
    back = plan_for(after(job, gone), [], NOW + timedelta(seconds=3), networks=TCPX_NETWORKS)
    assert back.status is not None and back.status["nccl"]["profile"] == "GPUDirectTCPX"
    assert [p["metadata"]["labels"][ATTEMPT_LABEL] for p in back.create] == ["2", "2"]


def test_jobs_without_gpus_or_with_an_explicit_tcp_profile_record_no_choice() -> None:
    for job in (manifest(("Worker", 2)), two_h100_pods(nccl={"profile": "TCP"})):
        plan = plan_for(job, [], NOW)  # decided without reading the networks
        assert plan.status is not None and "nccl" not in plan.status


@pytest.mark.parametrize(
    ("machine", "running", "reason"),
    [
        pytest.param(H100, frozenset(), "the cluster runs no DaemonSet nccl-tcpx-installer (the NCCL plugin's "
                     "installer), device-injector (the NRI device injector) in kube-system, gpudirect-system, "
                     "rdma-system, which GKE's GPUDirect guides install (see docs/gke.md)", id="TCPX, none"),
        pytest.param(H100, frozenset({"nccl-tcpx-installer"}), "the cluster runs no DaemonSet device-injector "
                     "(the NRI device injector)", id="TCPX without the NRI injector"),
        pytest.param({"type": "nvidia-h100-mega-80gb", "count": 8}, frozenset({"device-injector"}),
                     "no DaemonSet nccl-tcpxo-installer (the NCCL plugin's installer) in", id="TCPXO without its installer"),
        pytest.param({"type": "nvidia-b200", "count": 8}, frozenset({"nccl-tcpx-installer", "device-injector"}),
                     "no DaemonSet nccl-rdma-installer (the NCCL plugin's installer) in", id="RDMA without its installer"),
    ],
)  # fmt: skip
def test_auto_falls_back_to_tcp_where_gkes_installers_do_not_run_and_says_which(
    machine: dict[str, Any], running: frozenset[str], reason: str
) -> None:
    choice = choose(spec(("Worker", 2), accelerator=machine), GKE_NETWORKS, running)
    assert choice.profile == NcclProfileName.TCP and choice.degraded
    assert reason in choice.reason, choice.reason


def test_auto_takes_gpudirect_where_its_installers_run_or_when_they_could_not_be_read() -> None:
    job = spec(("Worker", 2), accelerator=H100)
    assert choose(job, TCPX_NETWORKS, frozenset({"nccl-tcpx-installer", "device-injector"})).profile == (
        NcclProfileName.GPUDIRECT_TCPX
    )
    assert choose(job, TCPX_NETWORKS, None).profile == NcclProfileName.GPUDIRECT_TCPX  # not judged
    explicit = spec(("Worker", 2), accelerator=H100, nccl={"profile": "GPUDirectTCPX"})
    assert choose(explicit, TCPX_NETWORKS, frozenset()).profile == NcclProfileName.GPUDIRECT_TCPX


def test_a_pass_passes_the_installers_it_read_to_the_choice() -> None:
    plan = plan_for(two_h100_pods(), [], NOW, networks=TCPX_NETWORKS, installers={})
    assert plan.status is not None and plan.status["nccl"]["profile"] == "TCP"
    assert [e.type for e in plan.events if e.reason == "NetworkChosen"] == ["Warning"]
