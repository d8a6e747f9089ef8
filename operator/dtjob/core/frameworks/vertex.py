"""Vertex AI custom-job compatibility: CLUSTER_SPEC and the AIP_* directories, for scripts written for Vertex."""

from __future__ import annotations

import json
from typing import Final

from dtjob.api import Role
from dtjob.core.frameworks.base import Env
from dtjob.core.gang import Gang, Member

# Vertex's worker pools: 0 the primary replica, 1 the workers, 2 parameter servers, 3 evaluators.
WORKER_POOLS: Final = {Role.MASTER: 0, Role.CHIEF: 0, Role.WORKER: 1, Role.PS: 2, Role.EVALUATOR: 3}


def vertex_task(gang: Gang, member: Member) -> tuple[int, int]:
    """(worker pool, index in it). Vertex scripts take rank 0 and the coordinator from workerpool0, so it
    is always the rank-0 pod: Worker 0 when there is no Master/Chief, the other workers then workerpool1
    from index 0, as Vertex numbers a job whose primary pool holds its first worker."""
    if member.role == Role.WORKER and gang.rank_zero.role == Role.WORKER:
        return (0, 0) if member.index == 0 else (1, member.index - 1)
    return WORKER_POOLS[member.role], member.index


def vertex_env(gang: Gang, member: Member, port: int) -> Env:
    cluster: dict[str, list[str]] = {}
    for m in sorted(gang.members, key=lambda m: vertex_task(gang, m)):
        cluster.setdefault(f"workerpool{vertex_task(gang, m)[0]}", []).append(f"{m.host}:{port}")
    pool, index = vertex_task(gang, member)
    task = {"type": f"workerpool{pool}", "index": index}
    spec = {"cluster": cluster, "environment": "cloud", "task": task}
    env = [
        ("CLUSTER_SPEC", json.dumps(spec, separators=(",", ":"))),
        ("AIP_CHECKPOINT_DIR", gang.spec.checkpoint.path),
    ]
    if gang.spec.output.model_dir:
        env.append(("AIP_MODEL_DIR", gang.spec.output.model_dir))
    if gang.spec.output.tensorboard_dir:
        env.append(("AIP_TENSORBOARD_LOG_DIR", gang.spec.output.tensorboard_dir))
    return env
