"""The project's container images, built with buildah into the local cluster's containerd.

Each image is tagged with its package's version (what examples/ and the chart reference): the operator's
is the release's (pyproject.toml, the chart's appVersion: CHANGELOG.md), the trainers' the trainer
runtime's. An image is rebuilt only when the hash of its inputs changes; the hash is kept in a stamp
file in the image cache.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from localcluster import Cluster

REPO = Path(__file__).resolve().parents[1]
SKIPPED = ("__pycache__", ".egg-info", ".pytest_cache", ".mypy_cache")


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: str  # relative to the repo root, which is the build context (.dockerignore applies)
    inputs: tuple[str, ...]  # files and folders whose content decides the tag
    package: str  # the pyproject.toml whose version is the tag

    @property
    def version(self) -> str:
        return str(tomllib.loads((REPO / self.package).read_text())["project"]["version"])

    @property
    def ref(self) -> str:
        return f"localhost/{self.name}:{self.version}"

    def digest(self) -> str:
        h = hashlib.sha256()
        for root in (REPO / p for p in (self.dockerfile, ".dockerignore", *self.inputs)):
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
            for f in files:
                if not any(s in part for part in f.parts for s in SKIPPED):
                    h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes())
        return h.hexdigest()[:16]


OPERATOR = Image(
    "dtjob-operator",
    "operator/Dockerfile",
    ("pyproject.toml", "README.md", "operator/dtjob"),
    "pyproject.toml",
)
_TRAINER_INPUTS = ("trainer-images/runtime", "trainer-images/examples")
_TRAINER_PACKAGE = "trainer-images/runtime/pyproject.toml"
TORCH_TRAINER = Image(
    "dtjob-trainer-torch",
    "trainer-images/torch/Dockerfile",
    ("trainer-images/torch", *_TRAINER_INPUTS),
    _TRAINER_PACKAGE,
)
TENSORFLOW_TRAINER = Image(
    "dtjob-trainer-tensorflow",
    "trainer-images/tensorflow/Dockerfile",
    ("trainer-images/tensorflow", *_TRAINER_INPUTS),
    _TRAINER_PACKAGE,
)
IMAGES = {image.name: image for image in (OPERATOR, TORCH_TRAINER, TENSORFLOW_TRAINER)}


def ensure(cluster: Cluster, image: Image) -> str:
    """Build and import `image` unless the node already holds this exact content; returns its ref."""
    stamp = cluster.layout.images / f"{image.name}.digest"
    digest = image.digest()
    if cluster.node.has_image(image.ref) and stamp.exists() and stamp.read_text() == digest:
        print(f"[images] {image.ref} up to date ({digest})", flush=True)
        return image.ref
    cluster.build_image(REPO, image.ref, REPO / image.dockerfile)
    stamp.write_text(digest)
    return image.ref
