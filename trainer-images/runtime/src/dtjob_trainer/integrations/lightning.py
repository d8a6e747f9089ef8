"""A Lightning callback that reports the training's progress to the operator (docs/progress.md):
`Trainer(..., callbacks=[DtjobProgressCallback(global_batch_size=...)])`. Every rank reports, as the
runtime's own session does; a checkpoint save is marked so that a long one is not taken for a hang."""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl

from dtjob_trainer.progress_report import ProgressPoster


class DtjobProgressCallback(pl.Callback):
    """`global_batch_size`: samples all ranks train on in a step, for samples/s (Lightning cannot know
    it for any batch); `poster`: where reports go, by default the operator's intake as the pod's
    environment names it (nothing when the pod has none), opened when training starts."""

    def __init__(self, global_batch_size: int = 0, poster: ProgressPoster | None = None) -> None:
        self._samples = global_batch_size
        self._poster, self._given = poster, poster is not None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        planned = trainer.estimated_stepping_batches
        total = int(planned) if planned and math.isfinite(planned) else None
        if not self._given:
            self._poster = ProgressPoster.from_environ(total_steps=total)
        elif self._poster is not None and total:
            self._poster.record_total_steps(total)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._poster is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self._poster.record_step(
            trainer.global_step,
            epoch=trainer.current_epoch,
            loss=float(loss) if loss is not None else None,
            samples=self._samples,
        )

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Called as the checkpoint is gathered, before it is written; the next step ends the save.
        if self._poster is not None:
            self._poster.checkpointing(True)
            self._poster.record_checkpoint(trainer.global_step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._poster is not None and not self._given:
            self._poster.close()  # sends the last report
