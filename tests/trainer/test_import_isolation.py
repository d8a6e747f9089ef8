"""Importing one framework's side of the runtime never imports the other framework."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("modules", "absent"),
    [
        pytest.param(
            [
                "dtjob_trainer.environment",
                "dtjob_trainer.termination",
                "dtjob_trainer.progress",
                "dtjob_trainer.checkpoint_files",
                "dtjob_trainer.reachability",
                "dtjob_trainer.exit_codes",
                "dtjob_trainer.nccl_env",
            ],
            ["torch", "tensorflow"],
            id="the core imports neither framework",
        ),
        pytest.param(
            ["dtjob_trainer.pytorch.session", "dtjob_trainer.pytorch.checkpoint"],
            ["tensorflow", "tf_keras"],
            id="the PyTorch side does not import TensorFlow",
        ),
        pytest.param(
            ["dtjob_trainer.tensorflow.strategy", "dtjob_trainer.tensorflow.callbacks"],
            ["torch"],
            id="the TensorFlow side does not import PyTorch",
        ),
        pytest.param(
            ["dtjob_trainer.integrations.huggingface", "dtjob_trainer.integrations.lightning"],
            ["tensorflow", "tf_keras"],
            id="the Hugging Face and Lightning callbacks do not import TensorFlow",
        ),
    ],
)
def test_imports_stay_on_their_side(modules: list[str], absent: list[str]) -> None:
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(sorted(m for m in {absent!r} if m in sys.modules))"
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert found.stdout.strip() == "[]"
