"""A Hugging Face `Trainer` callback that reports the training's progress to the operator
(docs/progress.md): `Trainer(..., callbacks=[DtjobProgressCallback()])`. Every rank reports, as the
runtime's own session does; a save is marked so that a long one is not taken for a hang."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from dtjob_trainer.progress_report import ProgressPoster


class DtjobProgressCallback(TrainerCallback):  # type: ignore[misc]
    """`poster`: where reports go; by default the operator's intake as the pod's environment names it
    (nothing when the pod has none), opened when training begins and the number of steps is known."""

    def __init__(self, poster: ProgressPoster | None = None) -> None:
        self._poster, self._given = poster, poster is not None
        self._loss: float | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if not self._given:
            self._poster = ProgressPoster.from_environ(total_steps=state.max_steps or None)
        elif self._poster is not None and state.max_steps:
            self._poster.record_total_steps(state.max_steps)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if logs and "loss" in logs:
            self._loss = float(logs["loss"])

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._poster is None:
            return
        samples = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        epoch = int(state.epoch) if state.epoch is not None else None
        self._poster.record_step(state.global_step, epoch=epoch, loss=self._loss, samples=samples)
        # The Trainer's flow callback, which runs first, has decided whether this step ends in a save.
        if control.should_save:
            self._poster.checkpointing(True)

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._poster is not None and control.should_save:
            self._poster.checkpointing(True)

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._poster is not None:
            self._poster.record_checkpoint(state.global_step)
            self._poster.checkpointing(False)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self._poster is not None and not self._given:
            self._poster.close()  # sends the last report
