"""Auto picks GPUDirect only where the cluster has the GKE Network objects its profile attaches pods to
and runs GKE's installer DaemonSets, and TCP (with a Warning saying why) where it has not; an explicit
profile without its Networks is Invalid until they exist. The Network CRD is a stand-in
(tests/data/gke-network-crd.yaml); the API server is real."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client

from localcluster import Cluster, sim
from localcluster.crds import wait_established
from tests.support.jobs import JOB_LABEL, Jobs, events_of, pytorch_job, status_of
from tests.support.paths import REPO
from tests.support.waiting import wait_for

# Cluster-scoped Networks, DeviceClasses and kube-system DaemonSets steer every operator's NCCL choice.
pytestmark = pytest.mark.cluster_wide

NETWORK_CRD = REPO / "tests" / "data" / "gke-network-crd.yaml"
GROUP, VERSION, PLURAL = "networking.gke.io", "v1", "networks"


def auto_job(name: str, accelerator: str | None = None) -> dict[str, Any]:
    """Two pods of a whole machine under Auto: by default 8 H100s (A3 High), the shape Auto would give
    GPUDirect-TCPX."""
    job = pytorch_job(
        name, workers=2, **({"accelerator": {"type": accelerator, "count": 8}} if accelerator else {})
    )
    del job["spec"]["nccl"]  # the default: Auto
    return job


@pytest.fixture
def without_networks(cluster_b: Cluster, objects: client.CustomObjectsApi) -> Iterator[None]:
    """No Network API at all (a cluster without GKE multi-networking), and none left behind."""
    cluster_b.kubectl("delete", "--ignore-not-found", "--wait", "-f", str(NETWORK_CRD))
    yield
    cluster_b.kubectl("delete", "--ignore-not-found", "--wait", "-f", str(NETWORK_CRD))


@pytest.fixture
def add_networks(
    cluster_b: Cluster, objects: client.CustomObjectsApi, without_networks: None
) -> Callable[..., None]:
    """Serve the Network API, then create Networks by name (as an admin following GKE's guide does)."""

    def add(*names: str) -> None:
        cluster_b.kubectl("apply", "-f", str(NETWORK_CRD))
        crd = yaml.safe_load(NETWORK_CRD.read_text())["metadata"]["name"]
        wait_established(cluster_b.kubectl, [crd])
        for name in names:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Network", "metadata": {"name": name},
                    "spec": {"type": "Device"}}  # fmt: skip
            wait_for(lambda body=body: _created(objects, body), f"Network {name} created")

    return add


def _created(objects: client.CustomObjectsApi, body: dict[str, Any]) -> bool | None:
    try:
        objects.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    except client.ApiException as err:
        if err.status == 404:  # discovery of a fresh CRD can lag its Established condition
            return None
        if err.status != 409:
            raise
    return True


@pytest.fixture
def add_daemonsets(api_client: client.ApiClient) -> Iterator[Callable[..., None]]:
    """Create DaemonSets by name, in kube-system as GKE's GPUDirect guides install them on Standard clusters
    (or the namespace given: Autopilot's), their pods matching no node here (only their presence counts),
    and delete them and the namespaces made for them afterwards."""
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    made: list[tuple[str, str]] = []
    namespaces: list[str] = []

    def add(*names: str, image: str = "pause", namespace: str = "kube-system") -> None:
        try:
            core.create_namespace({"metadata": {"name": namespace}})
            namespaces.append(namespace)
        except client.ApiException as err:
            if err.status != 409:
                raise
        for name in names:
            labels = {"k8s-app": name}
            body = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
                    "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
                             "spec": {"nodeSelector": {"dtjob.test/no-such-node": "true"},
                                      "containers": [{"name": "pause", "image": image}]}}}}  # fmt: skip
            apps.create_namespaced_daemon_set(namespace, body)
            made.append((name, namespace))

    yield add
    for name, namespace in made:
        apps.delete_namespaced_daemon_set(name, namespace)
    for namespace in namespaces:
        core.delete_namespace(namespace)


TCPX_DAEMONSETS = ("nccl-tcpx-installer", "device-injector")


def chosen(jobs: Jobs, name: str) -> dict[str, Any]:
    return wait_for(lambda: status_of(jobs, name).get("nccl"), f"status.nccl of {name}")


def network_events(core: client.CoreV1Api, namespace: str, name: str) -> list[client.CoreV1Event]:
    """The job's NetworkChosen Events, once there is one: the operator posts them after the status."""
    return wait_for(
        lambda: [e for e in events_of(core, namespace, name) if e.reason == "NetworkChosen"] or None,
        f"the NetworkChosen Event of {name}",
    )


def test_auto_falls_back_to_tcp_without_the_network_api_with_a_warning_naming_what_is_missing(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str, without_networks: None
) -> None:
    jobs.create(auto_job("plain"))
    assert chosen(jobs, "plain")["profile"] == "TCP"
    pods = jobs.wait_pods("plain", 2)
    assert all("networking.gke.io/interfaces" not in (p.metadata.annotations or {}) for p in pods)
    assert all(not p.spec.init_containers for p in pods)
    warnings = [e.message for e in network_events(core, namespace, "plain")]
    assert (
        len(warnings) == 1
        and "lacks the Network objects (networking.gke.io) vpc1, vpc2, vpc3, vpc4" in warnings[0]
    )


def test_auto_picks_gpudirect_once_the_networks_exist_and_an_explicit_profile_waits_for_its_own(
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    add_networks: Callable[..., None],
    add_daemonsets: Callable[..., None],
) -> None:
    add_networks("vpc1", "vpc2", "vpc3", "vpc4")
    add_daemonsets(*TCPX_DAEMONSETS)
    jobs.create(auto_job("fast"))
    assert chosen(jobs, "fast") == {
        "attempt": 1, "profile": "GPUDirectTCPX",
        "reason": "2 pods of 8 nvidia-h100-80gb GPUs, Networks vpc1..vpc4 present",
        "daemonImage": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.15",  # no plugin seen
    }  # fmt: skip
    pods = jobs.wait_pods("fast", 2)
    assert all([c.name for c in p.spec.init_containers] == ["tcpx-daemon"] for p in pods)
    assert all("devices.gke.io/container.tcpx-daemon" in p.metadata.annotations for p in pods)
    events = [(e.type, e.reason) for e in network_events(core, namespace, "fast")]
    assert events == [("Normal", "NetworkChosen")]

    mega = pytorch_job("mega", accelerator={"type": "nvidia-h100-mega-80gb", "count": 8},
                       nccl={"profile": "GPUDirectTCPXO"})  # fmt: skip
    jobs.create(mega)
    invalid = jobs.wait_condition("mega", "Invalid")
    assert "vpc5, vpc6, vpc7, vpc8, which this cluster lacks" in invalid["message"]
    assert jobs.pods("mega") == []
    add_networks("vpc5", "vpc6", "vpc7", "vpc8")
    jobs.patch(
        "mega", {"metadata": {"annotations": {"example.com/poke": "1"}}}
    )  # or wait out the 30 s recheck
    jobs.wait_pods("mega", 2)
    assert chosen(jobs, "mega")["profile"] == "GPUDirectTCPXO"
    assert (jobs.condition("mega", "Invalid") or {}).get("status") != "True"


def test_auto_falls_back_to_tcp_while_gkes_installers_do_not_run_and_picks_gpudirect_once_they_do(
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    add_networks: Callable[..., None],
    add_daemonsets: Callable[..., None],
) -> None:
    """Networks alone are not enough: without the plugin's installer the nodes have no NCCL plugin, without
    the NRI device injector the daemon gets no GPU devices."""
    add_networks("vpc1", "vpc2", "vpc3", "vpc4")
    jobs.create(auto_job("bare"))
    reason = chosen(jobs, "bare")["reason"]
    assert chosen(jobs, "bare")["profile"] == "TCP" and "no DaemonSet nccl-tcpx-installer" in reason, reason
    warnings = [e.message for e in network_events(core, namespace, "bare")]
    assert len(warnings) == 1 and "device-injector (the NRI device injector)" in warnings[0], warnings

    add_daemonsets("nccl-tcpx-installer")  # the plugin, but no injector yet
    jobs.create(auto_job("half"))
    reason = chosen(jobs, "half")["reason"]
    assert "no DaemonSet device-injector" in reason and "nccl-tcpx-installer" not in reason, reason

    add_daemonsets("device-injector")
    jobs.create(auto_job("whole"))
    assert chosen(jobs, "whole")["profile"] == "GPUDirectTCPX"


def test_the_tcpxo_daemon_is_the_installed_plugins_pair_and_an_unknown_plugin_falls_back_to_tcp(
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    api_client: client.ApiClient,
    namespace: str,
    add_networks: Callable[..., None],
    add_daemonsets: Callable[..., None],
) -> None:
    """The cluster's installer at Cluster Toolkit's release (plugin v1.0.14, whose daemon is v1.0.20; the
    profile's is v1.0.21): the pods run v1.0.20. Then the installer at a plugin no release note dtjob
    knows lists: Auto takes TCP, with a Warning naming the version."""
    plugin = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev"
    add_networks(*(f"vpc{i}" for i in range(1, 9)))
    add_daemonsets("device-injector")
    add_daemonsets("nccl-tcpxo-installer", image=f"{plugin}:v1.0.14")
    jobs.create(auto_job("mega", "nvidia-h100-mega-80gb"))
    daemon = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.20"
    assert chosen(jobs, "mega")["profile"] == "GPUDirectTCPXO"
    assert chosen(jobs, "mega")["daemonImage"] == daemon
    (event,) = network_events(core, namespace, "mega")
    assert event.type == "Normal" and "daemon v1.0.20, the pair of the NCCL plugin v1.0.14" in event.message
    pods = jobs.wait_pods("mega", 2)
    assert {c.image for p in pods for c in p.spec.init_containers if c.name == "tcpxo-daemon"} == {daemon}

    newer = {
        "spec": {"template": {"spec": {"containers": [{"name": "pause", "image": f"{plugin}:v1.0.99"}]}}}
    }
    client.AppsV1Api(api_client).patch_namespaced_daemon_set("nccl-tcpxo-installer", "kube-system", newer)
    jobs.create(auto_job("newer", "nvidia-h100-mega-80gb"))
    assert chosen(jobs, "newer")["profile"] == "TCP"
    (warning,) = network_events(core, namespace, "newer")
    assert warning.type == "Warning" and "installs the NCCL plugin v1.0.99, which" in warning.message


def test_on_autopilot_the_pods_take_the_shape_of_its_rdma_recipe(
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    add_networks: Callable[..., None],
    add_daemonsets: Callable[..., None],
) -> None:
    """The RDMA installer in rdma-system, where GKE's Autopilot manifest puts it: the pods keep gvnic-1 on
    eth1 and mount the host's NVIDIA and gIB directories read-only (tests/data/gke_recipes/autopilot.yaml)."""
    add_networks("gvnic-1", *(f"rdma-{i}" for i in range(8)))
    add_daemonsets("nccl-rdma-installer", namespace="rdma-system")
    jobs.create(auto_job("ultra", "nvidia-b200"))
    nccl = chosen(jobs, "ultra")
    assert (nccl["profile"], nccl.get("autopilot")) == ("RDMA", True), nccl
    assert "in Autopilot's shape" in nccl["reason"]
    pod = wait_for(lambda: _pod(core, namespace, "ultra-worker-0"), "pod ultra-worker-0")
    interfaces = json.loads(pod.metadata.annotations["networking.gke.io/interfaces"])
    assert interfaces[1] == {"interfaceName": "eth1", "network": "gvnic-1"} and len(interfaces) == 10
    mounts = {m.mount_path: m.read_only for m in pod.spec.containers[0].volume_mounts}
    assert mounts["/usr/local/nvidia"] is True and mounts["/usr/local/gib"] is True


def _pod(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


@pytest.mark.parametrize("example", sorted((REPO / "examples" / "gke").glob("*.yaml")), ids=lambda p: p.stem)
def test_the_gke_examples_are_accepted_by_the_api_server(
    cluster_b: Cluster, crd: dict[str, Any], namespace: str, example: Any
) -> None:
    """They need GKE to run; the CRD's schema and rules accept them as written."""
    cluster_b.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(example))


# GKE's managed DRANET, played here: the DeviceClass GKE installs and a driver's ResourceSlices listing each
# fake A4 node's 8 RDMA NICs. The driver name is this test's own (GKE's is not what dtjob reads: the pods
# claim by DeviceClass); the scheduler and the resource claim controller are the real ones.
DRANET_DRIVER = "dranet.stand-in.dtjob.io"


@pytest.fixture
def managed_dranet(cluster_b: Cluster, api_client: client.ApiClient) -> Iterator[list[str]]:
    """Two fake A4 (nvidia-b200) nodes whose RDMA NICs a DRA driver publishes, and the DeviceClass
    mrdma.google.com; all removed afterwards."""
    resource, core = client.ResourceV1Api(api_client), client.CoreV1Api(api_client)
    nodes = [
        sim.add_gpu_node(cluster_b, i, accelerator="nvidia-b200")
        for i in random.sample(range(5000, 10000), 2)
    ]
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": "mrdma.google.com"},
                                  "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRANET_DRIVER}"'}}]}})  # fmt: skip
    for node in nodes:
        resource.create_resource_slice({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-rdma"},
            "spec": {"driver": DRANET_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"rdma{i}"} for i in range(8)]},
        })  # fmt: skip
    yield nodes
    resource.delete_device_class("mrdma.google.com")
    for node in nodes:
        resource.delete_resource_slice(f"{node}-rdma")
        core.delete_node(node)


def test_auto_claims_the_gpu_nics_from_gkes_managed_dranet_and_the_scheduler_allocates_them(
    operator: KopfRunner,
    jobs: Jobs,
    api_client: client.ApiClient,
    namespace: str,
    without_networks: None,
    add_daemonsets: Callable[..., None],
    managed_dranet: list[str],
) -> None:
    """A4 machines without the rdma-N Networks but with DRANET's DeviceClass: TCP while no A4 node is
    labelled as running GKE's DRANET driver (GKE installs the DeviceClass on clusters without DRANET node
    pools too), ManagedRDMA once they are. Each pod claims all of its node's NICs from the job's
    ResourceClaimTemplate; the scheduler allocates them, so the two pods land on the two nodes that have
    NICs, one each."""
    add_daemonsets("nccl-rdma-installer")
    jobs.create(auto_job("class-only", "nvidia-b200"))
    assert chosen(jobs, "class-only")["profile"] == "TCP"
    assert (
        "nvidia-b200 nodes labelled cloud.google.com/gke-networking-dra-driver=true"
        in chosen(jobs, "class-only")["reason"]
    )
    jobs.delete("class-only")
    core = client.CoreV1Api(api_client)
    selector = f"{JOB_LABEL}=class-only"
    wait_for(lambda: not core.list_namespaced_pod(namespace, label_selector=selector).items or None,
             "the TCP job's pods gone")  # fmt: skip
    for node in managed_dranet:
        core.patch_node(
            node, {"metadata": {"labels": {"cloud.google.com/gke-networking-dra-driver": "true"}}}
        )
    jobs.create(auto_job("dranet", "nvidia-b200"))
    assert chosen(jobs, "dranet") == {
        "attempt": 1, "profile": "ManagedRDMA",
        "reason": "2 pods of 8 nvidia-b200 GPUs, their NICs claimed from GKE's managed DRANET (DeviceClass mrdma.google.com)",
    }  # fmt: skip
    resource = client.ResourceV1Api(api_client)
    template = resource.read_namespaced_resource_claim_template("dranet-gpu-nics", namespace)
    assert template.metadata.owner_references[0].kind == "DistributedTrainingJob"
    pods = jobs.wait_pods("dranet", 2, phase="Running")
    assert sorted(p.spec.node_name for p in pods) == sorted(managed_dranet)
    assert all("networking.gke.io/interfaces" not in p.metadata.annotations for p in pods)

    def allocated() -> dict[str, list[str]] | None:
        claims = resource.list_namespaced_resource_claim(namespace).items
        if len(claims) != 2 or any(c.status is None or c.status.allocation is None for c in claims):
            return None
        return {c.status.reserved_for[0].name: sorted(r.device for r in c.status.allocation.devices.results)
                for c in claims}  # fmt: skip

    devices = wait_for(allocated, "both pods' claims allocated")
    assert devices == {p.metadata.name: [f"rdma{i}" for i in range(8)] for p in pods}


def test_dtjob_check_says_what_a_job_would_get_and_every_refusal_and_creates_nothing(
    cluster_b: Cluster,
    core: client.CoreV1Api,
    namespace: str,
    add_networks: Callable[..., None],
    add_daemonsets: Callable[..., None],
    tmp_path: Path,
) -> None:
    """The cluster dressed as an A3 High one set up by Cluster Toolkit (TCPX plugin v3.1.9), with a GPU
    quota of 4 in the namespace: `dtjob check` names the network and the paired daemon, and the quota's
    refusal of each 8-GPU pod (the apiserver's dry run); without the quota every object is accepted. It
    never creates a thing."""
    add_networks(*(f"vpc{i}" for i in range(1, 5)))
    add_daemonsets("device-injector")
    add_daemonsets(
        "nccl-tcpx-installer",
        image="us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.9",
    )
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}}
    core.create_namespaced_resource_quota(namespace, quota)
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(auto_job("checked")))

    def check() -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "dtjob.cli", "check", "-f", str(manifest), "-n", namespace,
                "--kubeconfig", str(cluster_b.kubeconfig)]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    refused = check()
    assert refused.returncode == 1, refused.stdout + refused.stderr
    out = refused.stdout
    assert "Network: GPUDirectTCPX: 2 pods of 8 nvidia-h100-80gb GPUs" in out, out
    assert "daemon v2.0.12, the pair of the NCCL plugin v3.1.9" in out, out
    assert "nccl-tcpx-installer (kube-system, plugin v3.1.9)" in out, out
    for pod in ("checked-worker-0", "checked-worker-1"):
        line = next(line for line in out.splitlines() if f"Pod {pod} (Worker)" in line)
        assert "REFUSED" in line and "exceeded quota: gpus" in line, line
    assert "Service checked: accepted" in out, out

    core.delete_namespaced_resource_quota("gpus", namespace)
    # The apiserver's quota admission reads quotas from its own cache: the deletion reaches it eventually.
    accepted = wait_for(lambda: ((run := check()).returncode == 0 and run) or None, "every object accepted")
    assert "REFUSED" not in accepted.stdout
    assert core.list_namespaced_pod(namespace).items == []
    assert [s.metadata.name for s in core.list_namespaced_service(namespace).items] == []
