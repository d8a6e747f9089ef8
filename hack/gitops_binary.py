"""The Go test binary of tests/gitops (Flux's kstatus and the CEL health checks of docs/gitops.md), built
once per content of its module and Go toolchain into the cache, as localcluster/build.sh builds the
cluster's binaries: `make build` builds it (a cold build took 343 s on a fresh machine, far past what a
test may spend), and tests/unit/test_flux_health.py runs it. Go's own test cache would not do: it does
not see a change of the docs or the captured files, which lie outside the module."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from localcluster.layout import Layout

GO_MODULE = Path(__file__).resolve().parents[1] / "tests" / "gitops"


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
    if built.returncode != 0:
        raise SystemExit(f"[gitops] tests/gitops: the build failed:\n{built.stdout}{built.stderr}")
    partial.replace(binary)  # whole or not at all, should another run build it too
    print(f"[gitops] tests/gitops: built in {time.monotonic() - start:.1f}s into {binary.parent}")
    return binary


if __name__ == "__main__":
    gitops_test_binary()
    sys.exit(0)
