"""TensorFlow ParameterServerStrategy on the digits data set: `python -m dtjob_examples.tf_ps_digits`.

The chief coordinates: it runs `fit` and dispatches steps to the workers, whose variables live on the
parameter servers. Workers and parameter servers only serve until the job ends. BackupAndRestore
(per epoch) resumes the chief after a gang restart; SIGTERM to the chief ends the epoch, backs up and
exits with the preempted code. Target: test accuracy >= 0.93.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import tensorflow as tf
import tf_keras
from dtjob_trainer.environment import TrainerEnvironment, TrainerEnvironmentError
from dtjob_trainer.tensorflow.callbacks import PreemptibleBackupAndRestore
from dtjob_trainer.tensorflow.strategy import parameter_server_strategy, save_model, serve_cluster_task
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
    if env.tf_config is None:
        raise TrainerEnvironmentError("TF_CONFIG is not set; ParameterServerStrategy needs a cluster")
    if env.tf_config.task_type in ("worker", "ps"):
        serve_cluster_task(env.tf_config)
    if env.checkpoint_dir is None:
        raise TrainerEnvironmentError("DTJ_CHECKPOINT_DIR is not set")
    strategy = parameter_server_strategy()
    data = load_digits_split(args.seed)
    with strategy.scope():
        model = build_model(args.lr)

    def per_worker_dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch_size = context.get_per_replica_batch_size(args.global_batch_size)
        dataset = training_dataset(data, batch_size, args.seed)
        return dataset.shard(context.num_input_pipelines, context.input_pipeline_id)

    with TerminationSignal(env.preemption_budget_s, env.termination_message_path) as termination:
        history = model.fit(
            tf_keras.utils.experimental.DatasetCreator(per_worker_dataset),
            epochs=args.epochs,
            steps_per_epoch=steps_per_epoch(data, args.global_batch_size),
            callbacks=[
                PreemptibleBackupAndRestore(
                    env.checkpoint_dir / "backup", termination, save_freq=args.backup_every
                )
            ],
            verbose=0,
        )
    accuracy = test_accuracy(model, data)
    if env.model_dir is not None:
        save_model(model, env.model_dir, env.tf_config)
    print_result(task="chief", epochs_run=len(history.epoch), test_accuracy=accuracy)
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
