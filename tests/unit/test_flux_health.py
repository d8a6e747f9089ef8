"""Flux's readings of the captured states, kstatus's and the CEL healthCheckExprs' of docs/gitops.md,
checked against the docs' table by the Go test in tests/gitops (Flux is Go: its libraries, not a
re-implementation of them). The test binary is built once per content of its module and Go toolchain, as
localcluster/build.sh builds the cluster's binaries, outside the repo: a cold build takes about a minute
(cel-go, apimachinery), and a warm run a fraction of a second (Go's own test cache would not do: it does
not see a change of the docs or the captured files, which lie outside the module)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

from localcluster.layout import Layout
from tests.support.paths import REPO

GO_MODULE = REPO / "tests" / "gitops"


def go_env() -> dict[str, str]:
    """As localcluster/build.sh builds: the local toolchain, no cgo; go.mod's pins taken as they are."""
    cache = Layout.from_env().cache / "go-build"
    return {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
        "GOFLAGS": "-mod=mod",
        "GOCACHE": str(cache),
    }


def gitops_test_binary() -> Path:
    """The module's test binary, built unless this content of the module was built with this Go already."""
    key = hashlib.sha256(subprocess.run(["go", "version"], capture_output=True, check=True).stdout)
    for source in sorted([*GO_MODULE.glob("*.go"), GO_MODULE / "go.mod", GO_MODULE / "go.sum"]):
        key.update(source.name.encode() + b"\0" + source.read_bytes())
    binary = Layout.from_env().cache / "bin" / f"gitops-test-{key.hexdigest()[:12]}" / "gitops.test"
    if binary.exists():
        print(f"[gitops] tests/gitops: cached in {binary.parent}")
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    start, partial = time.monotonic(), binary.with_suffix(f".{os.getpid()}")
    built = subprocess.run(
        ["go", "test", "-vet=off", "-c", "-o", str(partial), "."],
        cwd=GO_MODULE, env=go_env(), capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    partial.replace(binary)  # whole or not at all, should another run build it too
    print(f"[gitops] tests/gitops: built in {time.monotonic() - start:.1f}s into {binary.parent}")
    return binary


def test_kstatus_and_the_documented_cel_health_checks_say_what_the_docs_table_says() -> None:
    ran = subprocess.run(
        [str(gitops_test_binary()), "-test.v"], cwd=GO_MODULE, capture_output=True, text=True, timeout=60
    )
    print(ran.stdout)
    assert ran.returncode == 0, ran.stdout + ran.stderr
