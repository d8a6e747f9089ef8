"""What the operator warns about in a valid spec: checkpoints that a gang restart would lose."""

from __future__ import annotations

from typing import Any

import pytest

from dtjob.api import DistributedTrainingJobSpec
from dtjob.api.semantics import checkpoint_warnings
from tests.support.builders import manifest

PVC = {"persistentVolumeClaim": {"claimName": "checkpoints"}}


def spec(*replicas: tuple[str, int], framework: str = "PyTorch", **fields: Any) -> DistributedTrainingJobSpec:
    return DistributedTrainingJobSpec.model_validate(
        manifest(*replicas, framework=framework, **fields)["spec"]
    )


def test_a_gang_without_a_checkpoint_volume_is_warned_that_a_restart_cannot_resume() -> None:
    assert checkpoint_warnings(spec(("Master", 1), ("Worker", 3))) == [
        "spec.checkpoint.volume is not set: each of the 4 pods would checkpoint into its own container "
        "filesystem at /checkpoints, which a gang restart discards, so the restarted gang cannot resume; "
        "set spec.checkpoint.volume to storage every pod mounts (e.g. a Filestore persistentVolumeClaim "
        "or GCS FUSE)"
    ]


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(spec(("Worker", 4), checkpoint={"volume": PVC}), id="a gang with a checkpoint volume"),
        pytest.param(spec(("Worker", 1)), id="a single pod"),
        pytest.param(spec(("Chief", 1), ("PS", 1), framework="TensorFlow", checkpoint={"path": "/ckpt", "volume": PVC}),
                     id="a TensorFlow gang with a volume at its own path"),
    ],
)  # fmt: skip
def test_no_warning(job: DistributedTrainingJobSpec) -> None:
    assert checkpoint_warnings(job) == []


def test_the_warning_counts_the_pods_of_every_role_and_names_the_checkpoint_path() -> None:
    job = spec(("Chief", 1), ("Worker", 2), ("PS", 1), framework="TensorFlow", checkpoint={"path": "/ckpt"})
    (warning,) = checkpoint_warnings(job)
    assert "each of the 4 pods" in warning and "at /ckpt" in warning and "spec.checkpoint.volume" in warning
