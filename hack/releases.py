"""Earlier releases, for upgrade tests: each release's source as test data (`git archive` of its commit:
the operator, its Dockerfile, chart and CRD), so a test does not depend on how deep a clone's history
goes. Unpacked once into the image cache, keyed by the archive's hash; its operator image is built from
it like this tree's (hack.images)."""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from hack.images import Image, prebuild
from localcluster.layout import Layout

REPO = Path(__file__).resolve().parents[1]
RELEASES = REPO / "tests" / "data" / "releases"
PREVIOUS = "0.1.0"  # the release the upgrade test (tests/e2e/test_upgrade.py) upgrades from


@dataclass(frozen=True)
class Release:
    """An earlier release's source, unpacked."""

    root: Path

    @property
    def operator(self) -> Image:
        return Image("dtjob-operator", "operator/Dockerfile", ("pyproject.toml", "README.md", "operator/dtjob"),
                     "pyproject.toml", root=self.root)  # fmt: skip

    @property
    def chart(self) -> Path:
        return self.root / "helm" / "dtjob-operator"

    @property
    def crd(self) -> Path:
        return self.root / "crds" / "training.dtjob.io_distributedtrainingjobs.yaml"


def unpacked(version: str, cache: Path) -> Release:
    """The release `version` (tests/data/releases/dtjob-VERSION.tar.gz, made by
    `git archive --format=tar.gz --prefix=dtjob-VERSION/ COMMIT operator pyproject.toml README.md helm crds
    .dockerignore`), unpacked under `cache`."""
    archive = RELEASES / f"dtjob-{version}.tar.gz"
    key = hashlib.sha256(archive.read_bytes()).hexdigest()[:12]
    target = cache / f"dtjob-{version}-{key}"
    if not target.is_dir():
        partial = cache / f"{target.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")
        (partial / f"dtjob-{version}").rename(target)  # whole or not at all
        shutil.rmtree(partial)
    return Release(target)


def in_cache(version: str, layout: Layout) -> Release:
    """The release `version` unpacked in the cluster's image cache."""
    return unpacked(version, layout.images / "releases")


def main(argv: list[str] | None = None) -> int:
    """`make test-images` builds the previous release's operator image with this tree's, beside the Go
    build: inside the upgrade test it took 290 s of a cold run's cluster-wide part (2026-12-02)."""
    parser = argparse.ArgumentParser(prog="python -m hack.releases")
    parser.add_argument("command", choices=["prebuild"])
    parser.add_argument("versions", nargs="*", default=[PREVIOUS], metavar="VERSION")
    args = parser.parse_args(argv)
    layout = Layout.from_env()
    for version in args.versions:
        prebuild(layout, in_cache(version, layout).operator)
    return 0


if __name__ == "__main__":
    sys.exit(main())
