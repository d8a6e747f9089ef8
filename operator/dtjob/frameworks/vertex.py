"""Vertex AI custom-job compatibility: CLUSTER_SPEC and the AIP_* directories, for scripts written for Vertex."""

from __future__ import annotations

import json
from typing import Final

from dtjob.api import Role
from dtjob.frameworks.base import Env
from dtjob.frameworks.gang import Gang, Member

# Vertex's worker pools: 0 the primary replica, 1 the workers, 2 parameter servers, 3 evaluators.
# A job without a Master/Chief has no workerpool0: its workers stay workerpool1, as their index says.
WORKER_POOLS: Final = {Role.MASTER: 0, Role.CHIEF: 0, Role.WORKER: 1, Role.PS: 2, Role.EVALUATOR: 3}


def vertex_env(gang: Gang, member: Member, port: int) -> Env:
    cluster: dict[str, list[str]] = {}
    for m in sorted(gang.members, key=lambda m: (WORKER_POOLS[m.role], m.index)):
        cluster.setdefault(f"workerpool{WORKER_POOLS[m.role]}", []).append(f"{m.host}:{port}")
    task = {"type": f"workerpool{WORKER_POOLS[member.role]}", "index": member.index}
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
