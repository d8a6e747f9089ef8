"""The volumes the operator mounts into the trainer: /dev/shm, the progress token, the attempt files under
restartStrategy InPlace, and the checkpoint volume with an fsGroup that lets the trainer write it."""

from __future__ import annotations

import copy
from typing import Any, Final

from dtjob.api import RestartStrategy
from dtjob.core.frameworks import Gang
from dtjob.core.names import ATTEMPT_LABEL, RANK_LABEL, RENDEZVOUS_HOST_ANNOTATION
from dtjob.core.progress import AUDIENCE, TOKEN_DIRECTORY, TOKEN_SECONDS
from dtjob.core.render.podspec import add_volume

SHM_VOLUME: Final = "dtj-shm"
CHECKPOINT_VOLUME: Final = "dtj-checkpoint"
# Under restartStrategy InPlace, the pod's attempt and rank labels and the rendezvous host as files (the
# downward API): the kubelet rewrites them together (one volume is swapped atomically) when the operator
# relabels a member kept for the next attempt or a spare that takes a rank, and the trainer runtime waits
# on them between rounds. A spare's attempt and rank files are empty. The env vars DTJ_ATTEMPT, RANK and
# MASTER_ADDR stay what they were when the pod was created.
ATTEMPT_DIRECTORY: Final = "/etc/dtjob/attempt"
ATTEMPT_FILE: Final = f"{ATTEMPT_DIRECTORY}/attempt"
ATTEMPT_VOLUME: Final = {
    "name": "dtj-attempt",
    "downwardAPI": {
        "items": [
            {"path": "attempt", "fieldRef": {"fieldPath": f"metadata.labels['{ATTEMPT_LABEL}']"}},
            {"path": "rank", "fieldRef": {"fieldPath": f"metadata.labels['{RANK_LABEL}']"}},
            {
                "path": "rendezvous-host",
                "fieldRef": {"fieldPath": f"metadata.annotations['{RENDEZVOUS_HOST_ANNOTATION}']"},
            },
        ]
    },
}
# The pod's token for the operator's progress intake: bound to the pod, for that audience only.
PROGRESS_TOKEN_VOLUME: Final = {
    "name": "dtj-progress-token",
    "projected": {
        "sources": [
            {
                "serviceAccountToken": {
                    "audience": AUDIENCE,
                    "expirationSeconds": TOKEN_SECONDS,
                    "path": "token",
                }
            }
        ]
    },
}
# The uid (and gid) the trainer images run as: `USER 1000:1000` in trainer-images/torch/Dockerfile and
# trainer-images/tensorflow/Dockerfile. As fsGroup, the group the kubelet gives a fresh volume to.
TRAINER_IMAGE_UID: Final = 1000


def add_job_volumes(gang: Gang, pod_spec: dict[str, Any], container: dict[str, Any]) -> None:
    """Each of the operator's volumes the job asks for, and its mount in the trainer."""
    spec = gang.spec
    if spec.shared_memory.enabled:
        empty_dir = {
            "medium": "Memory",
            **({"sizeLimit": spec.shared_memory.size_limit} if spec.shared_memory.size_limit else {}),
        }
        add_volume(pod_spec, container, {"name": SHM_VOLUME, "emptyDir": empty_dir}, "/dev/shm")
    if gang.progress_url is not None:
        add_volume(pod_spec, container, copy.deepcopy(PROGRESS_TOKEN_VOLUME), TOKEN_DIRECTORY)
    if spec.run_policy.restart_strategy == RestartStrategy.IN_PLACE:
        add_volume(pod_spec, container, copy.deepcopy(ATTEMPT_VOLUME), ATTEMPT_DIRECTORY)
    if spec.checkpoint.volume is not None:
        add_volume(
            pod_spec, container, {"name": CHECKPOINT_VOLUME, **spec.checkpoint.volume}, spec.checkpoint.path
        )
        _default_fs_group(pod_spec)


def _default_fs_group(pod_spec: dict[str, Any]) -> None:
    """A fresh PVC is root-owned and the trainer is not root: fsGroup has the kubelet hand the volume to
    the trainer's group. The template's own fsGroup, and the rest of its securityContext, are kept."""
    security = pod_spec["securityContext"] = pod_spec.get("securityContext") or {}
    if security.get("fsGroup") is None:
        security["fsGroup"] = TRAINER_IMAGE_UID
