"""Earlier releases, for upgrade tests: each release's source as test data (`git archive` of its commit:
the operator, its Dockerfile, chart and CRD), so a test does not depend on how deep a clone's history
goes. Unpacked once into the image cache, keyed by the archive's hash; its operator image is built from
it like this tree's (hack.images)."""

from __future__ import annotations

import hashlib
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from hack.images import Image

REPO = Path(__file__).resolve().parents[1]
RELEASES = REPO / "tests" / "data" / "releases"


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
