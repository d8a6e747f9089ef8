"""`make build` runs some of the repository's Python with the system python3, before the venv exists
(Makefile: `python3 -m hack.gitops_binary`; `python3 -m hack.stages` from localcluster/build.sh and
hack/install-deps.sh): those modules, and the localcluster package that `hack.gitops_binary` imports, take
only what the system Python has. A venv-only import there breaks `make build`, and `.ci/run` with it
(prometheus_client in localcluster/controlplane.py, 2026-12-03)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

RUN_BY_THE_SYSTEM_PYTHON = ("hack.stages", "hack.gitops_binary")
# The interpreter the venv was made from (`python3 -m venv` in the Makefile), not the venv's.
SYSTEM_PYTHON = Path(sys.base_prefix) / "bin" / "python3"


def test_what_make_build_runs_with_the_system_python_imports_there() -> None:
    code = "; ".join(f"import {module}" for module in RUN_BY_THE_SYSTEM_PYTHON)
    done = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
