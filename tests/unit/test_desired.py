"""What each child looks like: the Service, pod identity, the exact env contract, GPU and volume wiring."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import yaml

from dtjob.api import DistributedTrainingJobSpec
from dtjob.core.frameworks import Gang
from dtjob.core.names import JobRef
from dtjob.core.render import render_children, render_pod
from tests.support.builders import UID, container, manifest, template

SVC = "mnist.team-a.svc"


def pods(job: dict[str, Any], attempt: int = 1) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in render_children(job, attempt) if c["kind"] == "Pod"}


def env(pod: dict[str, Any], container_name: str = "trainer") -> list[tuple[str, Any]]:
    trainer = next(c for c in pod["spec"]["containers"] if c["name"] == container_name)
    return [(e["name"], e.get("value", e.get("valueFrom"))) for e in trainer["env"]]


def spec_json(cluster: dict[str, list[str]], task_type: str, index: int) -> str:
    return json.dumps(
        {"cluster": cluster, "environment": "cloud", "task": {"type": task_type, "index": index}},
        separators=(",", ":"),
    )


def torch_env(
    rank: int, world: int, master: str, role: str, index: int, cluster_spec: str, nproc: str = "1"
) -> list[tuple[str, Any]]:
    return [
        ("DTJ_JOB_NAME", "mnist"), ("DTJ_ROLE", role), ("DTJ_REPLICA_INDEX", str(index)), ("DTJ_ATTEMPT", "1"),
        ("DTJ_CHECKPOINT_DIR", "/checkpoints"),
        ("MASTER_ADDR", master), ("MASTER_PORT", "29500"), ("WORLD_SIZE", str(world)), ("RANK", str(rank)),
        ("NODE_RANK", str(rank)), ("LOCAL_RANK", "0"), ("PET_NNODES", str(world)), ("PET_NPROC_PER_NODE", nproc),
        ("PET_NODE_RANK", str(rank)), ("PET_MASTER_ADDR", master), ("PET_MASTER_PORT", "29500"),
        ("CLUSTER_SPEC", cluster_spec), ("AIP_CHECKPOINT_DIR", "/checkpoints"),
        ("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_DEBUG", "WARN"), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    ]  # fmt: skip


MASTER_AND_3 = {
    "workerpool0": [f"mnist-master-0.{SVC}:29500"],
    "workerpool1": [f"mnist-worker-{i}.{SVC}:29500" for i in range(3)],
}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param("mnist-master-0", torch_env(0, 4, f"mnist-master-0.{SVC}", "Master", 0, spec_json(MASTER_AND_3, "workerpool0", 0)),
                     id="the Master is rank 0 and points at itself"),
        pytest.param("mnist-worker-0", torch_env(1, 4, f"mnist-master-0.{SVC}", "Worker", 0, spec_json(MASTER_AND_3, "workerpool1", 0)),
                     id="Worker 0 is rank 1 after the Master"),
        pytest.param("mnist-worker-2", torch_env(3, 4, f"mnist-master-0.{SVC}", "Worker", 2, spec_json(MASTER_AND_3, "workerpool1", 2)),
                     id="the last Worker is rank 3 of a world of 4 pods"),
    ],
)  # fmt: skip
def test_a_master_and_three_workers_get_the_exact_pytorch_env(
    pod: str, expected: list[tuple[str, Any]]
) -> None:
    assert env(pods(manifest(("Master", 1), ("Worker", 3)))[pod]) == expected


def test_worker_zero_is_rank_zero_and_master_addr_of_a_worker_only_job() -> None:
    cluster = {"workerpool0": [f"mnist-worker-0.{SVC}:29500"], "workerpool1": [f"mnist-worker-1.{SVC}:29500"]}
    rendered = pods(manifest(("Worker", 2)))
    assert env(rendered["mnist-worker-0"]) == torch_env(
        0, 2, f"mnist-worker-0.{SVC}", "Worker", 0, spec_json(cluster, "workerpool0", 0)
    )
    assert env(rendered["mnist-worker-1"]) == torch_env(
        1, 2, f"mnist-worker-0.{SVC}", "Worker", 1, spec_json(cluster, "workerpool1", 0)
    )


TF_CLUSTER = {
    "chief": [f"mnist-chief-0.{SVC}:2222"],
    "worker": [f"mnist-worker-{i}.{SVC}:2222" for i in range(2)],
    "ps": [f"mnist-ps-0.{SVC}:2222"],
}
TF_POOLS = {
    "workerpool0": [f"mnist-chief-0.{SVC}:2222"],
    "workerpool1": [f"mnist-worker-{i}.{SVC}:2222" for i in range(2)],
    "workerpool2": [f"mnist-ps-0.{SVC}:2222"],
    "workerpool3": [f"mnist-evaluator-0.{SVC}:2222"],
}


def tf_env(role: str, index: int, task: str, pool: int, gpu: bool) -> list[tuple[str, Any]]:
    tf_config = json.dumps(
        {"cluster": TF_CLUSTER, "task": {"type": task, "index": index}, "environment": "cloud"},
        separators=(",", ":"),
    )
    return [
        ("DTJ_JOB_NAME", "mnist"), ("DTJ_ROLE", role), ("DTJ_REPLICA_INDEX", str(index)), ("DTJ_ATTEMPT", "1"),
        ("DTJ_CHECKPOINT_DIR", "/checkpoints"), ("TF_CONFIG", tf_config),
        ("CLUSTER_SPEC", spec_json(TF_POOLS, f"workerpool{pool}", index)), ("AIP_CHECKPOINT_DIR", "/checkpoints"),
        *([("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_DEBUG", "WARN")] if gpu else []),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param("mnist-chief-0", tf_env("Chief", 0, "chief", 0, gpu=True), id="the chief is task chief 0 and gets NCCL env"),
        pytest.param("mnist-worker-1", tf_env("Worker", 1, "worker", 1, gpu=True), id="worker 1 is task worker 1"),
        pytest.param("mnist-ps-0", tf_env("PS", 0, "ps", 2, gpu=False), id="a parameter server is task ps 0 without NCCL env"),
        pytest.param("mnist-evaluator-0", tf_env("Evaluator", 0, "evaluator", 3, gpu=False),
                     id="the evaluator has a task but is not in the training cluster"),
    ],
)  # fmt: skip
def test_a_chief_two_workers_a_ps_and_an_evaluator_get_the_exact_tensorflow_env(
    pod: str, expected: list[tuple[str, Any]]
) -> None:
    job = manifest(("Chief", 1), ("Worker", 2), ("PS", 1), ("Evaluator", 1), framework="TensorFlow")
    assert env(pods(job)[pod]) == expected


def test_template_env_wins_for_tunables_and_is_dropped_for_the_rendezvous_contract() -> None:
    user_env = [
        {"name": "RANK", "value": "7"},
        {"name": "NCCL_SOCKET_IFNAME", "value": "ens5"},
        {"name": "AIP_MODEL_DIR", "value": "/mine"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "DTJ_ATTEMPT", "value": "99"},
    ]
    job = manifest({"role": "Worker", "count": 1, "template": template(container(env=user_env))},
                   output={"modelDir": "gs://b/model"})  # fmt: skip
    names = env(pods(job)["mnist-worker-0"])
    cluster = {"workerpool0": [f"mnist-worker-0.{SVC}:29500"]}
    injected = [e for e in torch_env(0, 1, f"mnist-worker-0.{SVC}", "Worker", 0, spec_json(cluster, "workerpool0", 0))
                if e[0] != "NCCL_SOCKET_IFNAME"]  # fmt: skip
    # The operator's AIP_MODEL_DIR and NCCL_SOCKET_IFNAME give way to the template's; its RANK and DTJ_ATTEMPT do not.
    assert names == [
        *injected,
        ("NCCL_SOCKET_IFNAME", "ens5"),
        ("AIP_MODEL_DIR", "/mine"),
        ("POD_IP", {"fieldRef": {"fieldPath": "status.podIP"}}),
    ]


def test_the_headless_service_resolves_not_ready_pods_and_selects_the_job() -> None:
    service = render_children(manifest(("Worker", 2)), 1)[0]
    assert service["kind"] == "Service" and service["metadata"]["name"] == "mnist"
    assert service["spec"] == {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {"training.dtjob.io/job-name": "mnist"},
        "ports": [{"name": "torch", "port": 29500, "targetPort": 29500, "protocol": "TCP"}],
    }


def test_the_network_policy_admits_only_the_gangs_own_pods_on_every_port() -> None:
    job = manifest(("Master", 1), ("Worker", 2), networkPolicy={"enabled": True})
    children = render_children(job, attempt=2)
    assert [c["kind"] for c in children] == ["Service", "NetworkPolicy", "Pod", "Pod", "Pod"]
    policy = children[1]
    assert policy["apiVersion"] == "networking.k8s.io/v1" and "status" not in policy
    assert policy["metadata"] == {
        "name": "mnist", "namespace": "team-a",
        "labels": {"training.dtjob.io/job-name": "mnist", "training.dtjob.io/job-uid": UID},
        "ownerReferences": [{"apiVersion": "training.dtjob.io/v1alpha1", "kind": "DistributedTrainingJob",
                             "name": "mnist", "uid": UID, "controller": True, "blockOwnerDeletion": True}],
    }  # fmt: skip
    gang = {"matchLabels": {"training.dtjob.io/job-name": "mnist"}}
    # No `ports`: every port (the rendezvous, NCCL's, the preflight's); no namespaceSelector: this namespace.
    assert policy["spec"] == {
        "podSelector": gang,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": gang}]}],
    }
    # It selects every pod of the job, and every pod of the job is a peer it admits.
    for pod in children[2:]:
        assert gang["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert [c["kind"] for c in render_children(manifest(("Worker", 2)), 1)] == ["Service", "Pod", "Pod"]


def test_pods_are_named_labelled_owned_and_wired_for_dns_in_rank_order() -> None:
    children = render_children(manifest(("Master", 1), ("Worker", 2)), attempt=3)
    assert [c["metadata"]["name"] for c in children] == [
        "mnist",
        "mnist-master-0",
        "mnist-worker-0",
        "mnist-worker-1",
    ]
    pod = children[3]
    assert pod["apiVersion"] == "v1" and "status" not in pod
    assert pod["metadata"]["labels"] == {
        "training.dtjob.io/job-name": "mnist", "training.dtjob.io/job-uid": UID, "training.dtjob.io/role": "Worker",
        "training.dtjob.io/replica-index": "1", "training.dtjob.io/rank": "2", "training.dtjob.io/attempt": "3",
    }  # fmt: skip
    assert pod["metadata"]["ownerReferences"] == [{
        "apiVersion": "training.dtjob.io/v1alpha1", "kind": "DistributedTrainingJob", "name": "mnist", "uid": UID,
        "controller": True, "blockOwnerDeletion": True,
    }]  # fmt: skip
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"], pod["spec"]["restartPolicy"]) == (
        "mnist-worker-1",
        "mnist",
        "Never",
    )


def test_the_template_is_kept_and_only_the_trainer_container_is_wired() -> None:
    sidecar = container("logger", "fluent:1")
    tmpl = {"metadata": {"labels": {"team": "vision", "training.dtjob.io/role": "spoofed"}, "annotations": {"a": "b"}},
            "spec": {"containers": [sidecar, container(args=["--lr", "0.1"])], "restartPolicy": "Always",
                     "serviceAccountName": "trainer"}}  # fmt: skip
    pod = pods(manifest({"role": "Worker", "count": 1, "template": tmpl}))["mnist-worker-0"]
    logger, trainer = pod["spec"]["containers"]
    assert logger == sidecar and trainer["args"] == ["--lr", "0.1"] and trainer["env"]
    assert (
        pod["metadata"]["labels"]["team"] == "vision"
        and pod["metadata"]["labels"]["training.dtjob.io/role"] == "Worker"
    )
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert (pod["spec"]["restartPolicy"], pod["spec"]["serviceAccountName"]) == ("Never", "trainer")


def test_without_a_trainer_container_the_first_one_is_wired() -> None:
    tmpl = template(container("main"), container("helper"))
    pod = pods(manifest({"role": "Worker", "count": 1, "template": tmpl}))["mnist-worker-0"]
    main, helper = pod["spec"]["containers"]
    assert ("RANK", "0") in env(pod, "main") and "env" not in helper
    assert main["ports"] == [{"name": "torch", "containerPort": 29500, "protocol": "TCP"}]


def test_gpu_roles_get_accelerator_spot_and_gpu_wiring_and_cpu_roles_do_not() -> None:
    job = manifest(("Chief", 1), ("PS", 1), framework="TensorFlow",
                   accelerator={"type": "nvidia-l4", "count": 4, "spot": True})  # fmt: skip
    rendered = pods(job)
    chief, ps = rendered["mnist-chief-0"]["spec"], rendered["mnist-ps-0"]["spec"]
    assert chief["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-l4",
        "cloud.google.com/gke-spot": "true",
    }
    assert chief["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    ]
    assert chief["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "4"},
        "requests": {"nvidia.com/gpu": "4"},
    }
    assert "nodeSelector" not in ps and "tolerations" not in ps and "resources" not in ps["containers"][0]


def test_flex_start_selects_and_tolerates_gkes_flex_start_nodes() -> None:
    job = manifest(("Worker", 2), accelerator={"type": "nvidia-a100-80gb", "count": 2, "flexStart": True})
    spec = pods(job)["mnist-worker-1"]["spec"]
    assert spec["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-a100-80gb",
        "cloud.google.com/gke-flex-start": "true",
    }
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "cloud.google.com/gke-flex-start",
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        },
    ]


def test_the_template_keeps_its_own_resources_selector_and_tolerations_next_to_the_gpu_wiring() -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    tmpl = template(container(resources={"limits": {"memory": "8Gi"}, "requests": {"cpu": "2"}}),
                    nodeSelector={"pool": "a"}, tolerations=[toleration])  # fmt: skip
    job = manifest(
        {"role": "Worker", "count": 1, "template": tmpl}, accelerator={"type": "nvidia-l4", "count": 1}
    )
    spec = pods(job)["mnist-worker-0"]["spec"]
    assert spec["nodeSelector"] == {"pool": "a", "cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert spec["tolerations"][0] == toleration and len(spec["tolerations"]) == 2
    assert spec["containers"][0]["resources"] == {
        "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"}, "requests": {"cpu": "2", "nvidia.com/gpu": "1"}}  # fmt: skip


@pytest.mark.parametrize(
    ("shared_memory", "volumes"),
    [
        pytest.param({}, [{"name": "dtj-shm", "emptyDir": {"medium": "Memory"}}], id="shm is on by default without a size limit"),
        pytest.param({"sizeLimit": "16Gi"}, [{"name": "dtj-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
                     id="a size limit is passed to the emptyDir"),
        pytest.param({"enabled": False}, None, id="disabled shm adds no volume"),
    ],
)  # fmt: skip
def test_dev_shm_is_a_memory_backed_empty_dir(
    shared_memory: dict[str, Any], volumes: list[dict[str, Any]] | None
) -> None:
    spec = pods(manifest(("Worker", 1), sharedMemory=shared_memory))["mnist-worker-0"]["spec"]
    assert spec.get("volumes") == volumes
    assert spec["containers"][0].get("volumeMounts") == (
        [{"name": "dtj-shm", "mountPath": "/dev/shm"}] if volumes else None
    )


def test_a_template_that_mounts_its_own_dev_shm_keeps_it() -> None:
    own = {"name": "big-shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}
    tmpl = template(container(volumeMounts=[{"name": "big-shm", "mountPath": "/dev/shm"}]), volumes=[own])
    spec = pods(manifest({"role": "Worker", "count": 1, "template": tmpl}))["mnist-worker-0"]["spec"]
    assert spec["volumes"] == [own] and spec["containers"][0]["volumeMounts"] == [
        {"name": "big-shm", "mountPath": "/dev/shm"}
    ]


def test_the_checkpoint_volume_is_mounted_at_the_checkpoint_path_in_every_role() -> None:
    volume = {"persistentVolumeClaim": {"claimName": "filestore"}}
    job = manifest(("Chief", 1), ("Evaluator", 1), framework="TensorFlow",
                   checkpoint={"path": "/ckpt", "volume": volume}, sharedMemory={"enabled": False})  # fmt: skip
    for pod in pods(job).values():
        assert pod["spec"]["volumes"] == [{"name": "dtj-checkpoint", **volume}]
        assert pod["spec"]["containers"][0]["volumeMounts"] == [
            {"name": "dtj-checkpoint", "mountPath": "/ckpt"}
        ]
        assert ("DTJ_CHECKPOINT_DIR", "/ckpt") in env(pod) and ("AIP_CHECKPOINT_DIR", "/ckpt") in env(pod)


def nccl_names(job: dict[str, Any]) -> dict[str, Any]:
    pod = pods(job)["mnist-worker-0"]
    return {n: v for n, v in env(pod) if n.startswith(("NCCL_", "TORCH_NCCL_", "LD_LIBRARY_PATH"))}


@pytest.mark.parametrize(
    ("profile", "accelerator_type", "marker", "sidecar"),
    [
        pytest.param("TCP", "nvidia-l4", "NCCL_SOCKET_IFNAME", None, id="TCP"),
        pytest.param("GPUDirectTCPX", "nvidia-h100-80gb", "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME", "tcpx-daemon", id="GPUDirect-TCPX"),
        pytest.param("GPUDirectTCPXO", "nvidia-h100-mega-80gb", "NCCL_FASTRAK_IFNAME", "tcpxo-daemon", id="GPUDirect-TCPXO"),
        pytest.param("RDMA", "nvidia-h200-141gb", "NCCL_NET", None, id="RDMA over gIB"),
    ],
)  # fmt: skip
def test_each_profile_renders_its_env_and_its_daemon_as_a_native_sidecar(
    profile: str, accelerator_type: str, marker: str, sidecar: str | None
) -> None:
    job = manifest(
        ("Worker", 2), accelerator={"type": accelerator_type, "count": 8}, nccl={"profile": profile}
    )
    pod = pods(job)["mnist-worker-0"]
    assert marker in nccl_names(job)
    init = [c["name"] for c in pod["spec"].get("initContainers", [])]
    assert init == ([sidecar] if sidecar else [])
    if sidecar:  # a native sidecar: it ends with the trainer, so the pod completes
        assert pod["spec"]["initContainers"][0]["restartPolicy"] == "Always"
    assert ("networking.gke.io/interfaces" in pod["metadata"].get("annotations", {})) == (profile != "TCP")


def test_auto_renders_tcp_until_a_pass_has_chosen_with_the_clusters_networks() -> None:
    """A render without a choice (a docs example, `dtjob render`) assumes no GPUDirect Network objects."""
    job = manifest(("Worker", 2), accelerator={"type": "nvidia-h100-80gb", "count": 8})
    assert nccl_names(job)["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME" not in nccl_names(job)


@pytest.mark.parametrize(
    ("template_env", "expected"),
    [
        pytest.param([], "/usr/local/nvidia/lib64:/usr/local/nvidia/lib", id="no template value: what CUDA images set"),
        pytest.param([{"name": "LD_LIBRARY_PATH", "value": "/opt/conda/lib:/usr/local/nvidia/lib64"}],
                     "/usr/local/nvidia/lib64:/opt/conda/lib", id="the template's value follows, without repeats"),
    ],
)  # fmt: skip
def test_a_profile_prepends_its_library_directories_to_ld_library_path(
    template_env: list[dict[str, str]], expected: str
) -> None:
    template_ = template(container(env=template_env))
    job = manifest({"role": "Worker", "count": 2, "template": template_},
                   accelerator={"type": "nvidia-h100-80gb", "count": 8}, nccl={"profile": "GPUDirectTCPX"})  # fmt: skip
    rendered = env(pods(job)["mnist-worker-0"])
    assert [value for name, value in rendered if name == "LD_LIBRARY_PATH"] == [expected]


def test_tcp_leaves_ld_library_path_to_the_template() -> None:
    template_ = template(container(env=[{"name": "LD_LIBRARY_PATH", "value": "/mine"}]))
    job = manifest(
        {"role": "Worker", "count": 1, "template": template_}, accelerator={"type": "nvidia-l4", "count": 1}
    )
    assert [v for n, v in env(pods(job)["mnist-worker-0"]) if n == "LD_LIBRARY_PATH"] == ["/mine"]


def test_the_tcp_profile_defaults_and_spec_overrides_win() -> None:
    job = manifest(("Worker", 1), nccl={"profile": "TCP", "debug": "INFO",
                                        "env": [{"name": "NCCL_SOCKET_IFNAME", "value": "ens"}, {"name": "NCCL_ALGO", "value": "Tree"}]})  # fmt: skip
    assert nccl_names(job) == {
        "NCCL_SOCKET_IFNAME": "ens",
        "NCCL_DEBUG": "INFO",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "NCCL_ALGO": "Tree",
    }


def test_an_explicit_profile_overrides_auto() -> None:
    job = manifest(
        ("Worker", 1), accelerator={"type": "nvidia-h100-80gb", "count": 8}, nccl={"profile": "TCP"}
    )
    pod = pods(job)["mnist-worker-0"]
    assert "initContainers" not in pod["spec"] and "annotations" not in pod["metadata"]
    assert nccl_names(job) == {
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "WARN",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }


@pytest.mark.parametrize(
    ("torch", "accelerator", "nproc"),
    [
        pytest.param({}, {"type": "nvidia-l4", "count": 4}, "4", id="auto means one process per GPU"),
        pytest.param({}, None, "1", id="auto means one process on a CPU pod"),
        pytest.param({"nprocPerNode": 2}, {"type": "nvidia-l4", "count": 4}, "2", id="an explicit count wins"),
    ],
)  # fmt: skip
def test_nproc_per_node(torch: dict[str, Any], accelerator: dict[str, Any] | None, nproc: str) -> None:
    extra = {"accelerator": accelerator} if accelerator else {}
    assert ("PET_NPROC_PER_NODE", nproc) in env(
        pods(manifest(("Worker", 1), torch=torch, **extra))["mnist-worker-0"]
    )


def test_rendering_is_deterministic_plain_data_and_leaves_the_job_untouched() -> None:
    job = manifest(("Master", 1), ("Worker", 2), accelerator={"type": "nvidia-h100-mega-80gb", "count": 8, "spot": True},
                   checkpoint={"volume": {"csi": {"driver": "gcsfuse.csi.storage.gke.io"}}})  # fmt: skip
    before = json.dumps(job, sort_keys=True)
    first = yaml.safe_dump(
        render_children(job, 2)
    )  # safe_dump fails on anything but plain types (an enum, say)
    assert first == yaml.safe_dump(render_children(job, 2))
    assert json.dumps(job, sort_keys=True) == before


@pytest.mark.parametrize(
    ("trainer", "policy"),
    [
        pytest.param(container(), "FallbackToLogsOnError", id="by default a crash leaves its last log lines"),
        pytest.param(container(terminationMessagePolicy="File"), "File", id="the template's own policy is kept"),
    ],
)  # fmt: skip
def test_the_trainer_container_falls_back_to_its_log_for_a_termination_message(
    trainer: dict[str, Any], policy: str
) -> None:
    sidecar = container("logger", "fluent:1")
    pod = pods(manifest({"role": "Worker", "count": 1, "template": template(sidecar, trainer)}))[
        "mnist-worker-0"
    ]
    logger, wired = pod["spec"]["containers"]
    assert wired["terminationMessagePolicy"] == policy and logger == sidecar


PVC = {"persistentVolumeClaim": {"claimName": "checkpoints"}}


@pytest.mark.parametrize(
    ("checkpoint", "security_context", "expected"),
    [
        pytest.param({"volume": PVC}, None, {"fsGroup": 1000}, id="a checkpoint volume is given to the trainer's group"),
        pytest.param({"volume": PVC}, {"runAsNonRoot": True}, {"runAsNonRoot": True, "fsGroup": 1000},
                     id="the template's other securityContext fields are kept"),
        pytest.param({"volume": PVC}, {"fsGroup": 2000, "runAsUser": 2000}, {"fsGroup": 2000, "runAsUser": 2000},
                     id="the template's own fsGroup is kept"),
        pytest.param({}, None, None, id="without a checkpoint volume there is nothing to own"),
        pytest.param({}, {"runAsNonRoot": True}, {"runAsNonRoot": True}, id="without one the template's is untouched"),
    ],
)  # fmt: skip
def test_the_pod_fs_group_lets_the_non_root_trainer_write_a_fresh_checkpoint_volume(
    checkpoint: dict[str, Any], security_context: dict[str, Any] | None, expected: dict[str, Any] | None
) -> None:
    tmpl = template(**({"securityContext": security_context} if security_context else {}))
    job = manifest({"role": "Worker", "count": 2, "template": tmpl}, checkpoint=checkpoint)
    for pod in pods(job).values():
        assert pod["spec"].get("securityContext") == expected


@pytest.mark.parametrize(
    "replicas",
    [
        pytest.param((("Worker", 1),), id="one worker"),
        pytest.param((("Worker", 4),), id="four workers"),
        pytest.param((("Master", 1),), id="a master alone"),
        pytest.param((("Master", 1), ("Worker", 3)), id="a master and three workers"),
    ],
)
def test_vertex_cluster_spec_puts_rank_zero_in_workerpool0_and_agrees_with_rank(
    replicas: tuple[tuple[str, int], ...],
) -> None:
    """Vertex scripts read rank 0 and the coordinator from workerpool0 and number workerpool1 after it."""
    for pod in pods(manifest(*replicas)).values():
        values = dict(env(pod))
        spec = json.loads(values["CLUSTER_SPEC"])
        pool, index = spec["task"]["type"], spec["task"]["index"]
        rank = {"workerpool0": 0, "workerpool1": 1 + index}[pool]
        assert values["RANK"] == str(rank), pod["metadata"]["name"]
        assert spec["cluster"][pool][index].startswith(
            values["MASTER_ADDR"] if rank == 0 else pod["metadata"]["name"]
        )
        assert spec["cluster"]["workerpool0"] == [f"{values['MASTER_ADDR']}:{values['MASTER_PORT']}"]


@pytest.mark.parametrize(
    ("replicas", "pools"),
    [
        pytest.param((("Worker", 3),), {"worker-0": (0, 0), "worker-1": (1, 0), "worker-2": (1, 1)},
                     id="multi-worker mirrored: worker 0 is the primary pool"),
        pytest.param((("Chief", 1), ("Worker", 2), ("PS", 1)),
                     {"chief-0": (0, 0), "worker-0": (1, 0), "worker-1": (1, 1), "ps-0": (2, 0)},
                     id="parameter servers: the chief is the primary pool"),
        pytest.param((("Worker", 2), ("Evaluator", 1)), {"worker-0": (0, 0), "worker-1": (1, 0), "evaluator-0": (3, 0)},
                     id="workers and an evaluator"),
    ],
)  # fmt: skip
def test_vertex_worker_pools_of_tensorflow_shapes(
    replicas: tuple[tuple[str, int], ...], pools: dict[str, tuple[int, int]]
) -> None:
    rendered = pods(manifest(*replicas, framework="TensorFlow"))
    tasks = {}
    for name, pod in rendered.items():
        task = json.loads(dict(env(pod))["CLUSTER_SPEC"])["task"]
        tasks[name.removeprefix("mnist-")] = (int(task["type"].removeprefix("workerpool")), task["index"])
    assert tasks == pools


def test_a_placement_group_joins_the_gpu_pods_node_selector() -> None:
    job = manifest(("Chief", 1), ("PS", 1), framework="TensorFlow",
                   accelerator={"type": "nvidia-h100-80gb", "count": 8, "placementGroup": "pg-a"})  # fmt: skip
    rendered = pods(job)
    assert rendered["mnist-chief-0"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "cloud.google.com/gke-placement-group": "pg-a",
    }
    assert "nodeSelector" not in rendered["mnist-ps-0"]["spec"]  # parameter servers hold no GPU


GCSFUSE = {"csi": {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"bucketName": "ckpt"}}}


@pytest.mark.parametrize(
    ("fields", "annotated"),
    [
        pytest.param({"checkpoint": {"volume": GCSFUSE}}, True, id="a GCS FUSE checkpoint volume"),
        pytest.param(
            {"checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "x"}}}}, False, id="a PVC"
        ),
    ],
)
def test_a_gcs_fuse_volume_gets_the_annotation_that_injects_its_sidecar(
    fields: dict[str, Any], annotated: bool
) -> None:
    annotations = (
        pods(manifest(("Worker", 1), **fields))["mnist-worker-0"]["metadata"].get("annotations") or {}
    )
    assert annotations.get("gke-gcsfuse/volumes") == ("true" if annotated else None)


def test_a_gcs_fuse_volume_in_the_template_counts_and_the_templates_annotation_wins() -> None:
    template_ = template(container(), volumes=[{"name": "data", **GCSFUSE}])
    template_["metadata"] = {"annotations": {"gke-gcsfuse/volumes": "false"}}
    assert pods(manifest({"role": "Worker", "count": 1, "template": template(container(), volumes=[{"name": "data", **GCSFUSE}])}))[
        "mnist-worker-0"]["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true", **UNLIMITED_FUSE}  # fmt: skip
    kept = pods(manifest({"role": "Worker", "count": 1, "template": template_}))["mnist-worker-0"]
    assert kept["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "false"}


UNLIMITED_FUSE = {f"gke-gcsfuse/{r}-limit": "0" for r in ("cpu", "memory", "ephemeral-storage")}


@pytest.mark.parametrize(
    ("template_annotations", "autopilot", "expected"),
    [
        pytest.param({}, False, UNLIMITED_FUSE, id="unlimited by default"),
        pytest.param(
            {"gke-gcsfuse/memory-request": "4Gi"},
            False,
            {"gke-gcsfuse/memory-request": "4Gi"},
            id="a template that sizes the sidecar sizes all of it",
        ),
        pytest.param({}, True, {}, id="Autopilot refuses 0: its defaults stay"),
    ],
)
def test_the_fuse_sidecar_is_unlimited_unless_the_template_sizes_it_or_on_autopilot(
    template_annotations: dict[str, str], autopilot: bool, expected: dict[str, str]
) -> None:
    job = manifest(("Worker", 2), accelerator={"type": "nvidia-h200-141gb", "count": 8}, nccl={"profile": "RDMA"},
                   checkpoint={"volume": GCSFUSE})  # fmt: skip
    job["spec"]["replicas"][0]["template"]["metadata"] = {"annotations": template_annotations}
    spec = DistributedTrainingJobSpec.model_validate(job["spec"])
    gang = replace(Gang.of(JobRef.of(job), spec, 1), autopilot=autopilot)
    annotations = render_pod(gang, gang.members[0])["metadata"]["annotations"]
    assert {
        k: v for k, v in annotations.items() if k.startswith("gke-gcsfuse/") and k != "gke-gcsfuse/volumes"
    } == expected
    assert annotations["gke-gcsfuse/volumes"] == "true"
