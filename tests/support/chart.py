"""The Helm chart rendered locally (`helm template`)."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from localcluster.layout import Layout
from tests.support.paths import REPO

CHART = REPO / "helm" / "dtjob-operator"


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = Layout.from_env().binary("helm")
    return subprocess.run([str(binary), *args], capture_output=True, text=True, check=check)


def render(*sets: str) -> list[dict[str, Any]]:
    args = ["template", "r", str(CHART), "--namespace", "dtjob-system"]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]
