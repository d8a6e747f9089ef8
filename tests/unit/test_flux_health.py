"""Flux's readings of the captured states, kstatus's and the CEL healthCheckExprs' of docs/gitops.md,
checked against the docs' table by the Go test in tests/gitops (Flux is Go: its libraries, not a
re-implementation of them). The test binary is built by `make build` (hack/gitops_binary.py); here it
runs (a fraction of a second), or is built first where nobody ran `make build`."""

from __future__ import annotations

import subprocess

from hack.gitops_binary import GO_MODULE, gitops_test_binary


def test_kstatus_and_the_documented_cel_health_checks_say_what_the_docs_table_says() -> None:
    ran = subprocess.run(
        [str(gitops_test_binary()), "-test.v"], cwd=GO_MODULE, capture_output=True, text=True, timeout=60
    )
    print(ran.stdout)
    assert ran.returncode == 0, ran.stdout + ran.stderr
