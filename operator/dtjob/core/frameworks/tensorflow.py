"""TensorFlow: TF_CONFIG, with evaluators outside the training cluster (TensorFlow's convention)."""

from __future__ import annotations

import json
from typing import Final

from dtjob.api import DistributedTrainingJobSpec, Role
from dtjob.core.frameworks.base import Env
from dtjob.core.gang import Gang, Member

TASK_TYPES: Final = {Role.CHIEF: "chief", Role.WORKER: "worker", Role.PS: "ps", Role.EVALUATOR: "evaluator"}
# Evaluators get a task but are not part of the cluster the strategies connect.
CLUSTER_ROLES: Final = (Role.CHIEF, Role.WORKER, Role.PS)


class TensorFlowWiring:
    port_name = "tensorflow"

    def port(self, spec: DistributedTrainingJobSpec) -> int:
        return spec.tensorflow.port

    def env(self, gang: Gang, member: Member) -> Env:
        port = self.port(gang.spec)
        cluster = {
            TASK_TYPES[role]: [f"{m.host}:{port}" for m in gang.of_role(role)]
            for role in CLUSTER_ROLES
            if gang.of_role(role)
        }
        config = {
            "cluster": cluster,
            "task": {"type": TASK_TYPES[member.role], "index": member.index},
            "environment": "cloud",
        }
        return [("TF_CONFIG", json.dumps(config, separators=(",", ":")))]
