"""tf.distribute strategies built from the TF_CONFIG the operator renders.

TensorFlow parses TF_CONFIG and starts its gRPC server when a multi-worker strategy is constructed, so
build the strategy first thing in the program.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import NoReturn

import tensorflow as tf
import tf_keras

from dtjob_trainer import nccl_env
from dtjob_trainer.environment import TFConfig

log = logging.getLogger(__name__)


def collective_communication() -> tf.distribute.experimental.CommunicationOptions:
    """NCCL all-reduce when this worker sees a GPU, gRPC ring otherwise."""
    implementation = (
        tf.distribute.experimental.CommunicationImplementation.NCCL
        if tf.config.list_physical_devices("GPU")
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    return tf.distribute.experimental.CommunicationOptions(implementation=implementation)


def multi_worker_mirrored_strategy() -> tf.distribute.MultiWorkerMirroredStrategy:
    nccl_env.apply()  # the node's NCCL env script, before NCCL reads its variables
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=tf.distribute.cluster_resolver.TFConfigClusterResolver(),
        communication_options=collective_communication(),
    )


def parameter_server_strategy() -> tf.distribute.ParameterServerStrategy:
    """For the coordinator (the `chief` task); workers and parameter servers run serve_cluster_task."""
    return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())


def serve_cluster_task(tf_config: TFConfig) -> NoReturn:
    """Run this `worker` or `ps` task's server until the process is terminated.

    Under ParameterServerStrategy these tasks only execute what the coordinator sends; the job is done
    when the coordinator exits (the operator's RankZero success policy, then cleanup of the rest).
    """
    if tf_config.task_type not in ("worker", "ps"):
        raise ValueError(f"task type {tf_config.task_type!r} does not serve; only worker and ps do")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=tf_config.task_type,
        task_index=tf_config.task_index,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    log.info("serving %s %d at %s", tf_config.task_type, tf_config.task_index, server.target)
    server.join()
    raise SystemExit(0)  # join() returns only if the server is stopped


def save_model(model: tf_keras.Model, model_dir: str, tf_config: TFConfig | None) -> None:
    """Save `model` to `model_dir` from the chief.

    Under MultiWorkerMirroredStrategy saving is collective, so every worker saves; the others write to
    a throw-away directory (TensorFlow's documented pattern).
    """
    if tf_config is None or tf_config.is_chief:
        model.save(model_dir)
        return
    scratch = Path(tempfile.mkdtemp(prefix=f"{tf_config.task_type}-{tf_config.task_index}-"))
    try:
        model.save(str(scratch / "model"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
