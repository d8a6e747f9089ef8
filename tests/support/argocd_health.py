"""Argo CD's health check for DistributedTrainingJob (examples/argocd/health-check.yaml), run as Argo CD
runs it: the object as a Lua table in the global `obj`, the script's returned table read back."""

from __future__ import annotations

from typing import Any

import yaml
from lupa import LuaRuntime

from tests.support.paths import REPO

HEALTH_CHECK = REPO / "examples" / "argocd" / "health-check.yaml"
# argocd-cm's key for a kind's health check: resource.customizations.health.<group>_<kind>.
HEALTH_KEY = "resource.customizations.health.training.dtjob.io_DistributedTrainingJob"


def example_script() -> str:
    script: str = yaml.safe_load(HEALTH_CHECK.read_text())["data"][HEALTH_KEY]
    return script


def health(obj: dict[str, Any], script: str | None = None) -> tuple[str, str]:
    """The (status, message) the health check (`script`, the example's by default) gives `obj`."""
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    verdict = lua.execute(script if script is not None else example_script())
    return str(verdict["status"]), str(verdict["message"])
