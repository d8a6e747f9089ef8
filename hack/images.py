"""The project's container images, built with buildah into the local cluster's containerd.

Each image is tagged with its package's version (what examples/ and the chart reference): the operator's
is the release's (pyproject.toml, the chart's appVersion: CHANGELOG.md), the trainers' the trainer
runtime's. An image is rebuilt only when the hash of its inputs changes; the hash is kept in a stamp
file in the image cache.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from localcluster import Cluster
from localcluster.images import Buildah
from localcluster.layout import Layout

REPO = Path(__file__).resolve().parents[1]
SKIPPED = ("__pycache__", ".egg-info", ".pytest_cache", ".mypy_cache")


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: str  # relative to `root`, which is the build context (.dockerignore applies)
    inputs: tuple[str, ...]  # files and folders whose content decides the tag
    package: str  # the pyproject.toml whose version is the tag
    root: Path = REPO  # this tree, or the source of an earlier release (hack.releases)

    @property
    def version(self) -> str:
        return str(tomllib.loads((self.root / self.package).read_text())["project"]["version"])

    @property
    def ref(self) -> str:
        return f"localhost/{self.name}:{self.version}"

    def digest(self) -> str:
        h = hashlib.sha256()
        for root in (self.root / p for p in (self.dockerfile, ".dockerignore", *self.inputs)):
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
            for f in files:
                if not any(s in part for part in f.parts for s in SKIPPED):
                    h.update(str(f.relative_to(self.root)).encode() + b"\0" + f.read_bytes())
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


def _stamp(layout: Layout, image: Image) -> Path:
    """The digest of the content last imported into the node under the image's ref."""
    return layout.images / f"{image.name}-{image.version}.digest"


def _prebuilt(layout: Layout, image: Image, digest: str) -> Path:
    return layout.images / f"{image.name}-{image.version}-{digest}.docker.tar"


def ensure(cluster: Cluster, image: Image) -> str:
    """Build and import `image` unless the node already holds this exact content (a `prebuild` of it is
    imported); returns its ref."""
    stamp, digest = _stamp(cluster.layout, image), image.digest()
    if cluster.node.has_image(image.ref) and stamp.exists() and stamp.read_text() == digest:
        print(f"[images] {image.ref} up to date ({digest})", flush=True)
        return image.ref
    prebuilt = _prebuilt(cluster.layout, image, digest)
    if prebuilt.exists():
        cluster.import_image(prebuilt)
        prebuilt.unlink()
    else:
        cluster.build_image(image.root, image.ref, image.root / image.dockerfile)
    stamp.write_text(digest)
    return image.ref


def prebuild(layout: Layout, image: Image) -> None:
    """Build `image` into an archive before the cluster runs (the first `make demo` builds its images
    while the Go components build); `ensure` imports it. Nothing to do when this content was imported."""
    stamp, digest = _stamp(layout, image), image.digest()
    target = _prebuilt(layout, image, digest)
    if (stamp.exists() and stamp.read_text() == digest) or target.exists():
        print(f"[images] {image.ref} built already ({digest})", flush=True)
        return
    layout.images.mkdir(parents=True, exist_ok=True)
    buildah = Buildah(layout)
    built = buildah.build(image.root, image.ref, image.root / image.dockerfile)
    buildah.remove(image.ref)
    built.rename(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.images")
    parser.add_argument("command", choices=["prebuild"])
    parser.add_argument("names", nargs="+", choices=sorted(IMAGES), metavar="IMAGE")
    args = parser.parse_args(argv)
    layout = Layout.from_env()
    for name in args.names:
        prebuild(layout, IMAGES[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
