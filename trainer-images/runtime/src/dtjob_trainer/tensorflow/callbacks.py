"""Keras (tf_keras) callbacks: resume with BackupAndRestore, stop cleanly on SIGTERM, report progress
(to the pod's Prometheus endpoint and to the operator's intake)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf
import tf_keras

from dtjob_trainer.exit_codes import PREEMPTED_CHECKPOINT_SAVED
from dtjob_trainer.progress import ProgressReporter
from dtjob_trainer.progress_report import ProgressPoster
from dtjob_trainer.termination import TerminationSignal


class PreemptibleBackupAndRestore(tf_keras.callbacks.BackupAndRestore):  # type: ignore[misc]
    """BackupAndRestore that also saves and exits with PREEMPTED_CHECKPOINT_SAVED when SIGTERM arrives.

    The base class does the resume part: only the chief writes, every worker restores the chief's
    backup at the start of `fit`, and tf.train.CheckpointManager publishes checkpoints atomically.

    - MultiWorkerMirroredStrategy: after every batch the workers sum their "SIGTERM received" flags
      (an all-reduce), so a SIGTERM on any worker makes all of them back up the same batch and exit.
    - ParameterServerStrategy: Keras allows only epoch-level callbacks, so the coordinator stops at the
      end of the epoch it is in; keep epochs shorter than the budget (steps_per_epoch).
    """

    def __init__(
        self,
        backup_dir: Path,
        termination: TerminationSignal,
        *,
        save_freq: int | str = "epoch",
        delete_checkpoint: bool = True,
        poster: ProgressPoster | None = None,
    ) -> None:
        """`poster`: told when a backup is being written (not a hang, however long) and its step."""
        super().__init__(str(backup_dir), save_freq=save_freq, delete_checkpoint=delete_checkpoint)
        self._termination = termination
        self._poster = poster
        self._at_epoch_end = False
        self._count_requests: Any = None

    def set_model(self, model: tf_keras.Model) -> None:
        super().set_model(model)
        strategy = model.distribute_strategy
        if isinstance(strategy, tf.distribute.ParameterServerStrategy) and self.save_freq != "epoch":
            raise ValueError(
                "under ParameterServerStrategy Keras backs up per epoch only: use save_freq='epoch'"
            )
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):

            @tf.function  # type: ignore[untyped-decorator]
            def count_requests(flag: tf.Tensor) -> tf.Tensor:
                per_replica = strategy.run(tf.identity, args=(flag,))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._count_requests = count_requests
        else:
            self._count_requests = None

    def _implements_train_batch_hooks(self) -> bool:
        # The base class skips batch hooks when saving per epoch; stopping needs them wherever allowed.
        return not self._parameter_server_training()

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        super().on_train_batch_end(batch, logs)
        if self._stop_requested_anywhere():
            self._backup(epoch=self._current_epoch, batch=batch)
            self._exit(self._current_epoch * self.params["steps"] + batch + 1)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._at_epoch_end = True
        try:
            super().on_epoch_end(epoch, logs)  # under ParameterServerStrategy this backs the epoch up
        finally:
            self._at_epoch_end = False
        if self._parameter_server_training() and self._termination.requested:
            self._exit((epoch + 1) * self.params["steps"])

    def _backup(self, epoch: int, batch: int = 0) -> None:
        if self._poster is None:
            super()._backup(epoch, batch)
            return
        self._poster.checkpointing(True)
        try:
            super()._backup(epoch, batch)
        finally:
            self._poster.checkpointing(False)
        # At an epoch's end the backup holds the whole epoch; otherwise up to the batch just trained.
        steps = self.params["steps"]
        self._poster.record_checkpoint(
            (epoch + 1) * steps if self._at_epoch_end else epoch * steps + batch + 1
        )

    def _parameter_server_training(self) -> bool:
        return isinstance(self.model.distribute_strategy, tf.distribute.ParameterServerStrategy)

    def _stop_requested_anywhere(self) -> bool:
        flag = 1.0 if self._termination.requested else 0.0
        if self._count_requests is None:
            return flag > 0
        return bool(self._count_requests(tf.constant(flag)).numpy() > 0)

    def _exit(self, step: int) -> None:
        self._termination.checkpoint_saved(step)
        raise SystemExit(PREEMPTED_CHECKPOINT_SAVED)


class ProgressCallback(tf_keras.callbacks.Callback):  # type: ignore[misc]
    """Feed a ProgressReporter (the chief's Prometheus endpoint) and a ProgressPoster (the operator's
    intake, from every worker) from `fit`; either may be None. Batch hooks: not usable under
    ParameterServerStrategy."""

    def __init__(
        self, reporter: ProgressReporter | None, global_batch_size: int, poster: ProgressPoster | None = None
    ) -> None:
        super().__init__()
        self._reporter, self._poster = reporter, poster
        self._global_batch_size = global_batch_size
        self._epoch = 0

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        if self._poster is not None:
            self._poster.record_total_steps(self.params["epochs"] * self.params["steps"])

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        step = self._epoch * self.params["steps"] + batch + 1
        loss = float((logs or {}).get("loss", float("nan")))
        if self._reporter is not None:
            self._reporter.record_step(step, self._epoch, loss, self._global_batch_size)
        if self._poster is not None:
            self._poster.record_step(step, self._epoch, loss, self._global_batch_size)
