"""Manifests `kubectl apply` must reject, each with a substring of the apiserver's error (which names the field).

Importable data, used twice: against the pydantic model in unit tests (tests/unit/test_api.py), and
against a real apiserver with the generated CRD installed (integration tests). The model reports errors
in the apiserver's words (dtjob.api.errors), so one expected substring serves both.

BAD_MANIFESTS: created from scratch. BAD_UPDATES / ALLOWED_UPDATES: a valid manifest, then a JSON merge
patch of its spec; only the apiserver can check these (CEL transition rules compare with the stored
object), so unit tests only check that the CRD carries each message.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple


def job(name: str = "bad", framework: str = "PyTorch", **spec: Any) -> dict[str, Any]:
    replicas = spec.pop("replicas", [replica("Worker", 2)])
    return {
        "apiVersion": "training.dtjob.io/v1alpha1",
        "kind": "DistributedTrainingJob",
        "metadata": {"name": name},
        "spec": {"framework": framework, "replicas": replicas, **spec},
    }


def replica(role: str, count: int | None = 1, template: dict[str, Any] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"role": role}
    if count is not None:
        item["count"] = count
    item["template"] = (
        template
        if template is not None
        else {"spec": {"containers": [{"name": "trainer", "image": "busybox:1"}]}}
    )
    return item


class BadManifest(NamedTuple):
    id: str
    manifest: dict[str, Any]
    message: str


class BadUpdate(NamedTuple):
    id: str
    manifest: dict[str, Any]
    spec_patch: dict[str, Any]
    message: str


class AllowedUpdate(NamedTuple):
    id: str
    manifest: dict[str, Any]
    spec_patch: dict[str, Any]


BAD_MANIFESTS: list[BadManifest] = [
    BadManifest("a replica count of zero is rejected",
                job(replicas=[replica("Worker", 0)]),
                "spec.replicas[0].count in body should be greater than or equal to 1"),
    BadManifest("an unknown framework is rejected",
                job(framework="Jax"),
                'spec.framework: Unsupported value: "Jax"'),
    BadManifest("a job without a framework is rejected",
                {**job(), "spec": {"replicas": [replica("Worker")]}},
                "spec.framework: Required value"),
    BadManifest("a PyTorch job with a Chief is rejected because Chief is a TensorFlow role",
                job(replicas=[replica("Chief"), replica("Worker")]),
                "spec.replicas[].role must be Master or Worker for a PyTorch job"),
    BadManifest("a TensorFlow job with a Master is rejected because Master is a PyTorch role",
                job(framework="TensorFlow", replicas=[replica("Master"), replica("Worker")]),
                "spec.replicas[].role must be Chief, Worker, PS or Evaluator for a TensorFlow job"),
    BadManifest("two Masters are rejected",
                job(replicas=[replica("Master", 2), replica("Worker")]),
                "spec.replicas[].count must be 1 for the Master, Chief and Evaluator roles"),
    BadManifest("two Chiefs are rejected",
                job(framework="TensorFlow", replicas=[replica("Chief", 2)]),
                "spec.replicas[].count must be 1 for the Master, Chief and Evaluator roles"),
    BadManifest("two Evaluators are rejected",
                job(framework="TensorFlow", replicas=[replica("Worker", 2), replica("Evaluator", 2)]),
                "spec.replicas[].count must be 1 for the Master, Chief and Evaluator roles"),
    BadManifest("a job with no replicas is rejected",
                job(replicas=[]),
                "spec.replicas in body should have at least 1 items"),
    BadManifest("a TensorFlow job of only PS and Evaluator is rejected because nothing holds rank 0",
                job(framework="TensorFlow", replicas=[replica("PS"), replica("Evaluator")]),
                "spec.replicas[].role: a TensorFlow job needs a Chief or Worker replica (it holds rank 0; spec.framework)"),
    BadManifest("a TensorFlow job with a PS but no Chief is rejected because nothing coordinates its workers",
                job(framework="TensorFlow", replicas=[replica("Worker", 2), replica("PS")]),
                "spec.replicas[].role: a TensorFlow job with PS replicas needs a Chief (ParameterServerStrategy's coordinator)"),
    BadManifest("a preflight in a TensorFlow job is rejected: the sweep runs torch.distributed",
                job(framework="TensorFlow", replicas=[replica("Chief"), replica("Worker", 2)],
                    nccl={"preflight": {"enabled": True}}),
                "spec.nccl.preflight.enabled needs framework PyTorch (the sweep runs torch.distributed)"),
    BadManifest("an elastic job with a Master is rejected: torchrun's c10d rendezvous has none",
                job(replicas=[replica("Master"), replica("Worker", 2)], torch={"elastic": {"minReplicas": 1}}),
                "spec.torch.elastic needs spec.framework PyTorch and Worker replicas only (spec.replicas[].role: "
                "torchrun's c10d rendezvous has no Master)"),
    BadManifest("an elastic job with minReplicas above its Worker count is rejected",
                job(replicas=[replica("Worker", 2)], torch={"elastic": {"minReplicas": 3}}),
                "spec.torch.elastic.minReplicas must be at most the Worker count (spec.replicas[].count)"),
    BadManifest("an elastic job with maxReplicas below its Worker count is rejected",
                job(replicas=[replica("Worker", 3)], torch={"elastic": {"minReplicas": 1, "maxReplicas": 2}}),
                "spec.torch.elastic.maxReplicas must be at least the Worker count (spec.replicas[].count)"),
    BadManifest("an elastic job with the NCCL preflight is rejected: a replacement's would wait for peers",
                job(replicas=[replica("Worker", 2)], torch={"elastic": {"minReplicas": 1}},
                    nccl={"preflight": {"enabled": True}}),
                "spec.nccl.preflight.enabled cannot be combined with spec.torch.elastic (a replaced pod's "
                "preflight would wait for peers that are training already)"),
    BadManifest("an elastic job that succeeds only when all Workers do is rejected",
                job(replicas=[replica("Worker", 2)], torch={"elastic": {"minReplicas": 1}},
                    runPolicy={"successPolicy": "AllWorkers"}),
                "spec.runPolicy.successPolicy must be RankZero with spec.torch.elastic (a replacement still "
                "starting when the others finish would never succeed)"),
    BadManifest("an in-place restart of a TensorFlow job is rejected: the rounds rebuild a torch process group",
                job(framework="TensorFlow", replicas=[replica("Worker", 2)],
                    runPolicy={"restartStrategy": "InPlace"}),
                "spec.runPolicy.restartStrategy InPlace needs spec.framework PyTorch without spec.torch.elastic"),
    BadManifest("an in-place restart of an elastic job is rejected: torchrun replaces its members already",
                job(replicas=[replica("Worker", 2)], torch={"elastic": {"minReplicas": 1}},
                    runPolicy={"restartStrategy": "InPlace"}),
                "spec.runPolicy.restartStrategy InPlace needs spec.framework PyTorch without spec.torch.elastic"),
    BadManifest("hot spares without in-place restarts are rejected: a spare takes a rank only in place",
                job(replicas=[{**replica("Worker", 2), "spares": 1}]),
                "spec.replicas[].spares needs spec.runPolicy.restartStrategy InPlace and one process a pod"),
    BadManifest("hot spares of pods that run several torchrun workers are rejected",
                job(replicas=[{**replica("Worker", 2), "spares": 1}], torch={"nprocPerNode": 4},
                    runPolicy={"restartStrategy": "InPlace"}),
                "spec.replicas[].spares needs spec.runPolicy.restartStrategy InPlace and one process a pod"),
    BadManifest("hot spares of pods with several GPUs and nprocPerNode auto are rejected",
                job(replicas=[{**replica("Worker", 2), "spares": 1}], accelerator={"type": "nvidia-l4", "count": 2},
                    runPolicy={"restartStrategy": "InPlace"}),
                "spec.replicas[].spares needs spec.runPolicy.restartStrategy InPlace and one process a pod"),
    BadManifest("a negative number of spares is rejected",
                job(replicas=[{**replica("Worker", 2), "spares": -1}], runPolicy={"restartStrategy": "InPlace"}),
                "spec.replicas[0].spares in body should be greater than or equal to 0"),
    BadManifest("more than 16 spares are rejected",
                job(replicas=[{**replica("Worker", 2), "spares": 17}], runPolicy={"restartStrategy": "InPlace"}),
                "spec.replicas[0].spares in body should be less than or equal to 16"),
    BadManifest("an unknown restartStrategy is rejected",
                job(runPolicy={"restartStrategy": "Resume"}),
                'spec.runPolicy.restartStrategy: Unsupported value: "Resume"'),
    BadManifest("an elastic minReplicas of zero is rejected",
                job(replicas=[replica("Worker", 2)], torch={"elastic": {"minReplicas": 0}}),
                "spec.torch.elastic.minReplicas in body should be greater than or equal to 1"),
    BadManifest("the same role listed twice is rejected",
                job(replicas=[replica("Worker"), replica("Worker")]),
                "spec.replicas[1]: Duplicate value"),
    BadManifest("a template with an empty container list is rejected",
                job(replicas=[replica("Worker", template={"spec": {"containers": []}})]),
                "spec.replicas[].template.spec.containers must list at least one container"),
    BadManifest("a template without a pod spec is rejected",
                job(replicas=[replica("Worker", template={"metadata": {"labels": {"a": "b"}}})]),
                "spec.replicas[].template.spec.containers must list at least one container"),
    BadManifest("a negative backoffLimit is rejected",
                job(runPolicy={"backoffLimit": -1}),
                "spec.runPolicy.backoffLimit in body should be greater than or equal to 0"),
    BadManifest("a negative maxPreemptions is rejected",
                job(runPolicy={"maxPreemptions": -1}),
                "spec.runPolicy.maxPreemptions in body should be greater than or equal to 0"),
    BadManifest("an activeDeadlineSeconds of zero is rejected",
                job(runPolicy={"activeDeadlineSeconds": 0}),
                "spec.runPolicy.activeDeadlineSeconds in body should be greater than or equal to 1"),
    BadManifest("a negative ttlSecondsAfterFinished is rejected",
                job(runPolicy={"ttlSecondsAfterFinished": -5}),
                "spec.runPolicy.ttlSecondsAfterFinished in body should be greater than or equal to 0"),
    BadManifest("a schedulingTimeoutSeconds of zero is rejected",
                job(runPolicy={"schedulingTimeoutSeconds": 0}),
                "spec.runPolicy.schedulingTimeoutSeconds in body should be greater than or equal to 1"),
    BadManifest("an unknown restartPolicy is rejected",
                job(runPolicy={"restartPolicy": "Always"}),
                'spec.runPolicy.restartPolicy: Unsupported value: "Always"'),
    BadManifest("a torch port of zero is rejected",
                job(torch={"port": 0}),
                "spec.torch.port in body should be greater than or equal to 1"),
    BadManifest("a tensorflow port above 65535 is rejected",
                job(framework="TensorFlow", tensorflow={"port": 70000}),
                "spec.tensorflow.port in body should be less than or equal to 65535"),
    BadManifest("nprocPerNode zero is rejected",
                job(torch={"nprocPerNode": 0}),
                "spec.torch.nprocPerNode must be auto or an integer from 1 to 128"),
    BadManifest("nprocPerNode as a word other than auto is rejected",
                job(torch={"nprocPerNode": "gpu"}),
                "spec.torch.nprocPerNode must be auto or an integer from 1 to 128"),
    BadManifest("an accelerator count of zero is rejected",
                job(accelerator={"type": "nvidia-l4", "count": 0}),
                "spec.accelerator.count in body should be greater than or equal to 1"),
    BadManifest("spot and flex-start together are rejected because a VM has one provisioning model",
                job(accelerator={"type": "nvidia-l4", "count": 1, "spot": True, "flexStart": True}),
                "spec.accelerator: spot and flexStart cannot both be true"),
    BadManifest("a GPUDirect profile without an accelerator is rejected",
                job(nccl={"profile": "GPUDirectTCPX"}),
                "spec.nccl.profile GPUDirectTCPX, GPUDirectTCPXO, RDMA and ManagedRDMA need spec.accelerator"),
    BadManifest("an NCCL variable set twice is rejected",
                job(nccl={"env": [{"name": "NCCL_ALGO", "value": "Ring"}, {"name": "NCCL_ALGO", "value": "Tree"}]}),
                "spec.nccl.env[1]: Duplicate value"),
    BadManifest("a relative checkpoint path is rejected",
                job(checkpoint={"path": "checkpoints"}),
                "spec.checkpoint.path in body should match '^/'"),
    BadManifest("a shared memory size that is not a quantity is rejected",
                job(sharedMemory={"sizeLimit": "lots"}),
                "spec.sharedMemory.sizeLimit in body should match"),
    BadManifest("a 46-character name is rejected because pod names would outgrow a DNS label",
                job(name="a" * 46),
                "metadata.name must be at most 45 characters"),
    BadManifest("a name with a dot is rejected because it names the headless Service",
                job(name="my.job"),
                "metadata.name must be a DNS-1035 label"),
]  # fmt: skip


def _running() -> dict[str, Any]:
    return job(name="immutable", accelerator={"type": "nvidia-l4", "count": 1}, nccl={"profile": "TCP"})


def _suspended() -> dict[str, Any]:
    manifest = _running()
    manifest["spec"]["runPolicy"] = {"suspend": True}
    return manifest


def _image(image: str) -> dict[str, Any]:
    return {
        "replicas": [replica("Worker", 2, {"spec": {"containers": [{"name": "trainer", "image": image}]}})]
    }


BAD_UPDATES: list[BadUpdate] = [
    BadUpdate("changing the framework is rejected", _running(), {"framework": "TensorFlow"}, "spec.framework is immutable"),
    BadUpdate("changing a replica count is rejected", _running(), {"replicas": [replica("Worker", 3)]},
              "spec.replicas roles and counts are immutable, even while suspended"),
    BadUpdate("changing a replica count while suspended is rejected the same way", _suspended(),
              {"replicas": [replica("Worker", 3)]}, "spec.replicas roles and counts are immutable, even while suspended"),
    BadUpdate("changing the accelerator is rejected", _running(), {"accelerator": {"type": "nvidia-l4", "count": 2}},
              "spec.accelerator is immutable"),
    BadUpdate("removing the accelerator is rejected", _running(), {"accelerator": None}, "spec.accelerator is immutable"),
    BadUpdate("changing the image of a job that is not suspended is rejected", _running(), _image("busybox:2"),
              "can change only while spec.runPolicy.suspend is true"),
    BadUpdate("changing the NCCL settings of a job that is not suspended is rejected", _running(), {"nccl": {"debug": "INFO"}},
              "can change only while spec.runPolicy.suspend is true"),
]  # fmt: skip

ALLOWED_UPDATES: list[AllowedUpdate] = [
    AllowedUpdate("suspending a running job is allowed", _running(), {"runPolicy": {"suspend": True}}),
    AllowedUpdate("resuming a suspended job is allowed", _suspended(), {"runPolicy": {"suspend": False}}),
    AllowedUpdate("changing the image while suspending is allowed", _running(), {**_image("busybox:2"), "runPolicy": {"suspend": True}}),
    AllowedUpdate("changing the deadline of a running job is allowed", _running(), {"runPolicy": {"activeDeadlineSeconds": 60}}),
]  # fmt: skip


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what `kubectl patch --type merge` sends), for applying an update offline."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
