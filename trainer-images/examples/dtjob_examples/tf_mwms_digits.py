"""TensorFlow MultiWorkerMirroredStrategy on the digits data set: `python -m dtjob_examples.tf_mwms_digits`.

Every worker trains a replica (TF_CONFIG from the operator); BackupAndRestore resumes after a gang
restart; SIGTERM on any worker backs up the current step and exits with the preempted code.
Target: test accuracy >= 0.93.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from contextlib import ExitStack

from dtjob_trainer.environment import TrainerEnvironment, TrainerEnvironmentError
from dtjob_trainer.progress import ProgressReporter
from dtjob_trainer.progress_report import ProgressPoster
from dtjob_trainer.tensorflow.callbacks import PreemptibleBackupAndRestore, ProgressCallback
from dtjob_trainer.tensorflow.strategy import multi_worker_mirrored_strategy, save_model
from dtjob_trainer.termination import TerminationSignal

from dtjob_examples.digits import load_digits_split
from dtjob_examples.keras_digits import (
    build_model,
    parse_args,
    steps_per_epoch,
    test_accuracy,
    training_dataset,
)
from dtjob_examples.reporting import configure_logging, print_result


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv, __doc__)
    configure_logging()
    env = TrainerEnvironment.from_environ()
    if env.checkpoint_dir is None:
        raise TrainerEnvironmentError("DTJ_CHECKPOINT_DIR is not set")
    strategy = multi_worker_mirrored_strategy()
    is_chief = env.tf_config is None or env.tf_config.is_chief
    data = load_digits_split(args.seed)
    with strategy.scope():
        model = build_model(args.lr)
    with ExitStack() as stack:
        termination = stack.enter_context(
            TerminationSignal(env.preemption_budget_s, env.termination_message_path)
        )
        # Every worker reports to the operator's intake (when it takes reports); the chief serves metrics.
        poster = ProgressPoster.from_environ()
        if poster is not None:
            stack.enter_context(poster)
        callbacks = [
            PreemptibleBackupAndRestore(
                env.checkpoint_dir / "backup", termination, save_freq=args.backup_every, poster=poster
            )
        ]
        reporter = None
        if is_chief and env.metrics_port is not None:
            reporter = stack.enter_context(ProgressReporter(env.metrics_port, attempt=env.attempt))
        if reporter is not None or poster is not None:
            callbacks.append(ProgressCallback(reporter, args.global_batch_size, poster))
        history = model.fit(
            training_dataset(data, args.global_batch_size, args.seed),
            epochs=args.epochs,
            steps_per_epoch=steps_per_epoch(data, args.global_batch_size),
            callbacks=callbacks,
            verbose=0,
        )
    accuracy = test_accuracy(model, data)
    if env.model_dir is not None:
        save_model(model, env.model_dir, env.tf_config)
    print_result(
        task=f"{env.tf_config.task_type}-{env.tf_config.task_index}" if env.tf_config else "local",
        epochs_run=len(history.epoch),
        test_accuracy=accuracy,
    )
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
