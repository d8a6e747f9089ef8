"""The Hugging Face `Trainer` and Lightning callbacks (dtjob_trainer.integrations) in real training runs
on the CPU, reporting to a local HTTP server standing in for the operator's intake: what reaches it is
read with the operator's own Report model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dtjob.core.progress import Report
from tests.support.local_intake import intake

STEPS, BATCH, SAVE_EVERY = 30, 4, 10


def features_and_targets() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS * BATCH, 4, generator=generator)
    return x, x.sum(dim=1)


@pytest.fixture
def reporting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The intake, with the pod's environment pointing at it as the operator sets it up."""
    token = tmp_path / "token"
    token.write_text("pod-token")
    with intake() as (server, url):
        for name, value in {"DTJ_PROGRESS_URL": url, "DTJ_PROGRESS_TOKEN_FILE": str(token),
                            "DTJ_PROGRESS_INTERVAL_SECONDS": "0.2"}.items():  # fmt: skip
            monkeypatch.setenv(name, value)
        yield server


def assert_reported_the_whole_run(bodies: list[dict[str, Any]]) -> None:
    reports = [Report.model_validate(body) for body in bodies]
    assert reports, "no report reached the intake"
    last = reports[-1]
    assert (last.step, last.total_steps, last.last_checkpoint_step) == (STEPS, STEPS, STEPS), last
    assert last.loss is not None and last.step_seconds is not None
    assert last.samples_per_second is not None and last.samples_per_second > 0
    steps = [r.step for r in reports]
    assert steps == sorted(steps), steps


def test_a_hugging_face_trainer_reports_its_steps_loss_and_checkpoints(
    reporting: Any, tmp_path: Path
) -> None:
    from dtjob_trainer.integrations.huggingface import DtjobProgressCallback
    from transformers import Trainer, TrainingArguments

    class Regression(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            predicted = self.linear(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(predicted, labels), "logits": predicted}

    x, y = features_and_targets()
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=STEPS, per_device_train_batch_size=BATCH,
        logging_steps=5, save_strategy="steps", save_steps=SAVE_EVERY, report_to=[], use_cpu=True,
        disable_tqdm=True,
    )  # fmt: skip
    dataset = [{"x": x[i], "labels": y[i]} for i in range(len(x))]
    trainer = Trainer(
        model=Regression(), args=arguments, train_dataset=dataset, callbacks=[DtjobProgressCallback()]
    )
    trainer.train()
    assert_reported_the_whole_run(reporting.bodies())
    assert reporting.received[0][0] == "Bearer pod-token"


def test_a_lightning_trainer_reports_its_steps_loss_and_checkpoints(reporting: Any, tmp_path: Path) -> None:
    import lightning.pytorch as pl
    from dtjob_trainer.integrations.lightning import DtjobProgressCallback
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.linear(x).squeeze(-1), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    x, y = features_and_targets()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=SAVE_EVERY, save_top_k=-1)
    trainer = pl.Trainer(
        max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[checkpoints, DtjobProgressCallback(global_batch_size=BATCH)],
    )  # fmt: skip
    trainer.fit(Regression(), loader)
    assert_reported_the_whole_run(reporting.bodies())


def test_outside_dtjob_the_callbacks_do_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dtjob_trainer.integrations import huggingface
    from transformers import TrainerControl, TrainerState, TrainingArguments

    monkeypatch.delenv("DTJ_PROGRESS_URL", raising=False)
    callback = huggingface.DtjobProgressCallback()
    state, control = TrainerState(max_steps=3, global_step=1), TrainerControl(should_save=True)
    arguments = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    for event in ("on_train_begin", "on_step_end", "on_save", "on_train_end"):
        getattr(callback, event)(arguments, state, control)  # no intake: no poster, no error
