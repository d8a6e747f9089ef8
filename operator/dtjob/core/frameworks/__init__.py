"""Framework specifics behind one tiny interface: the rendezvous port and each member's environment."""

from __future__ import annotations

from typing import Final

from dtjob.api import Framework
from dtjob.core.frameworks.base import Env, FrameworkWiring
from dtjob.core.frameworks.pytorch import PyTorchWiring
from dtjob.core.frameworks.tensorflow import TensorFlowWiring
from dtjob.core.frameworks.vertex import vertex_env
from dtjob.core.gang import Gang, Member

WIRINGS: Final[dict[Framework, FrameworkWiring]] = {
    Framework.PYTORCH: PyTorchWiring(),
    Framework.TENSORFLOW: TensorFlowWiring(),
}


def wiring(framework: Framework) -> FrameworkWiring:
    return WIRINGS[framework]


__all__ = ["Env", "FrameworkWiring", "Gang", "Member", "vertex_env", "wiring"]
