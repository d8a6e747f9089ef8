"""Reading the pod's environment: the operator's rendezvous contract and the runtime's knobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dtjob_trainer.environment import TFConfig, TorchRendezvous, TrainerEnvironment, TrainerEnvironmentError

TORCH_POD = {
    "MASTER_ADDR": "job-worker-0.job",
    "MASTER_PORT": "29500",
    "WORLD_SIZE": "4",
    "RANK": "2",
    "LOCAL_RANK": "0",
    "DTJ_JOB_NAME": "job",
    "DTJ_ROLE": "Worker",
    "DTJ_REPLICA_INDEX": "2",
    "DTJ_ATTEMPT": "3",
    "DTJ_CHECKPOINT_DIR": "/checkpoints",
    "AIP_MODEL_DIR": "gs://bucket/model",
}


def test_a_pytorch_pods_environment_gives_its_rendezvous_and_directories() -> None:
    env = TrainerEnvironment.from_environ(TORCH_POD)
    assert env.torch == TorchRendezvous("job-worker-0.job", 29500, world_size=4, rank=2, local_rank=0)
    assert (env.job_name, env.role, env.replica_index, env.attempt) == ("job", "Worker", 2, 3)
    assert env.checkpoint_dir == Path("/checkpoints")
    assert env.model_dir == "gs://bucket/model"
    assert env.tf_config is None


def test_without_any_rendezvous_variables_the_process_trains_alone() -> None:
    env = TrainerEnvironment.from_environ({})
    assert env.torch == TorchRendezvous("127.0.0.1", 29500, world_size=1, rank=0, local_rank=0)
    assert env.checkpoint_dir is None
    assert env.metrics_port == 9400


def test_vertex_checkpoint_directory_is_the_fallback() -> None:
    assert TrainerEnvironment.from_environ({"AIP_CHECKPOINT_DIR": "/ckpt"}).checkpoint_dir == Path("/ckpt")


def test_metrics_port_zero_turns_the_endpoint_off() -> None:
    assert TrainerEnvironment.from_environ({"DTJ_METRICS_PORT": "0"}).metrics_port is None


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        pytest.param({"RANK": "two"}, "RANK='two'", id="a rank that is not a number"),
        pytest.param(
            {"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "m"}, "RANK=2", id="a rank outside the world"
        ),
        pytest.param({"WORLD_SIZE": "2", "RANK": "1"}, "MASTER_ADDR", id="several ranks and no master"),
        pytest.param(
            {"DTJ_PREEMPTION_BUDGET_SECONDS": "0"}, "DTJ_PREEMPTION_BUDGET_SECONDS", id="a zero budget"
        ),
        pytest.param({"TF_CONFIG": '{"cluster": {}}'}, "TF_CONFIG", id="a TF_CONFIG without a task"),
    ],
)
def test_malformed_variables_are_rejected_naming_the_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(TrainerEnvironmentError, match=named):
        TrainerEnvironment.from_environ(environ)


def tf_config(cluster: dict[str, list[str]], task_type: str, index: int) -> TFConfig:
    raw = json.dumps(
        {"cluster": cluster, "task": {"type": task_type, "index": index}, "environment": "cloud"}
    )
    parsed = TrainerEnvironment.from_environ({"TF_CONFIG": raw}).tf_config
    assert parsed is not None
    return parsed


@pytest.mark.parametrize(
    ("cluster", "task_type", "index", "is_chief"),
    [
        pytest.param(
            {"worker": ["w0:2222", "w1:2222"]}, "worker", 0, True, id="worker 0 leads when there is no chief"
        ),
        pytest.param({"worker": ["w0:2222", "w1:2222"]}, "worker", 1, False, id="other workers do not"),
        pytest.param({"chief": ["c:2222"], "worker": ["w0:2222"]}, "chief", 0, True, id="the chief leads"),
        pytest.param(
            {"chief": ["c:2222"], "worker": ["w0:2222"]}, "worker", 0, False, id="worker 0 under a chief"
        ),
        pytest.param({"chief": ["c:2222"], "ps": ["p:2222"]}, "ps", 0, False, id="a parameter server"),
    ],
)
def test_tf_config_names_the_chief_as_tensorflow_does(
    cluster: dict[str, list[str]], task_type: str, index: int, is_chief: bool
) -> None:
    parsed = tf_config(cluster, task_type, index)
    assert (parsed.task_type, parsed.task_index, dict(parsed.cluster)) == (task_type, index, cluster)
    assert parsed.is_chief is is_chief
