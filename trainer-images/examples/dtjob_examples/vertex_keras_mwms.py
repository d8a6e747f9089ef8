"""A tf.keras script as written for Vertex AI custom jobs; it knows nothing about dtjob and runs unchanged.

tf.distribute.MultiWorkerMirroredStrategy() reads TF_CONFIG itself; the model is a plain
tf.keras.Sequential trained with model.fit on a tf.data dataset of global batches, and it is saved to
AIP_MODEL_DIR by the chief only (the other workers write theirs to a temporary directory and delete
it, as TensorFlow's multi-worker Keras tutorial does). It needs TF_USE_LEGACY_KERAS=1 (set in the
TensorFlow trainer image): Keras 3, tf.keras's default, cannot fit under this strategy. Run it as
`python -m dtjob_examples.vertex_keras_mwms` or as a plain file. Target: test accuracy >= 0.9.
"""

import os
import shutil
import tempfile

import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

EPOCHS = 10
PER_WORKER_BATCH_SIZE = 32
MIN_ACCURACY = 0.9


def load_data():
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int64")
    return train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)


def build_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(64,)),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def is_chief(resolver) -> bool:
    """The chief task, or worker 0 when the cluster has no chief, or a process without TF_CONFIG."""
    if resolver.task_type is None:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return not has_chief and resolver.task_type == "worker" and resolver.task_id == 0


def model_dir() -> str:
    # Vertex hands out gs:// URIs and mounts buckets under /gcs/ with Cloud Storage FUSE.
    path = os.environ["AIP_MODEL_DIR"]
    return "/gcs/" + path[len("gs://") :] if path.startswith("gs://") else path


def main() -> int:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    chief = is_chief(resolver)
    global_batch_size = PER_WORKER_BATCH_SIZE * strategy.num_replicas_in_sync

    x_train, x_test, y_train, y_test = load_data()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(len(x_train), seed=0)
        .repeat()
        .batch(global_batch_size)
        .with_options(options)
    )
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(global_batch_size).with_options(options)

    with strategy.scope():
        model = build_model()
    model.fit(train, epochs=EPOCHS, steps_per_epoch=len(x_train) // global_batch_size, verbose=2)
    _, accuracy = model.evaluate(test, verbose=0)

    # Every worker takes part in saving (it may run collectives); only the chief's copy is kept.
    target = model_dir() if chief else tempfile.mkdtemp()
    model.save(target)
    if not chief:
        shutil.rmtree(target, ignore_errors=True)

    print(f"task={resolver.task_type}-{resolver.task_id} test_accuracy={accuracy:.4f}", flush=True)
    return 0 if accuracy >= MIN_ACCURACY else 1


if __name__ == "__main__":
    raise SystemExit(main())
