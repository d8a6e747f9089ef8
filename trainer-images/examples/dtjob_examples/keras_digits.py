"""What the two TensorFlow examples share: arguments, the model, the input pipeline, evaluation."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from dtjob_examples.digits import CLASSES, FEATURES, DigitsSplit


def parse_args(argv: Sequence[str], description: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--global-batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--backup-every", default="epoch", help='"epoch" or a number of steps between backups'
    )
    parser.add_argument("--min-accuracy", type=float, default=0.93, help="exit 1 below this test accuracy")
    args = parser.parse_args(argv)
    if args.backup_every != "epoch":
        args.backup_every = int(args.backup_every)
    return args


def build_model(lr: float) -> tf_keras.Model:
    """Call inside `strategy.scope()` so the variables are distributed."""
    model = tf_keras.Sequential(
        [
            tf_keras.Input((FEATURES,)),
            tf_keras.layers.Dense(128, activation="relu"),
            tf_keras.layers.Dense(64, activation="relu"),
            tf_keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer=tf_keras.optimizers.Adam(lr),
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def steps_per_epoch(data: DigitsSplit, global_batch_size: int) -> int:
    return math.ceil(len(data.x_train) / global_batch_size)


def training_dataset(data: DigitsSplit, batch_size: int, seed: int) -> tf.data.Dataset:
    return (
        tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
        .shuffle(len(data.x_train), seed=seed)
        .batch(batch_size)
        .repeat()
    )


def test_accuracy(model: tf_keras.Model, data: DigitsSplit) -> float:
    logits = model(data.x_test, training=False)
    return float(np.mean(np.argmax(np.asarray(logits), axis=1) == data.y_test))
