"""The project's container images, built with buildah into the local cluster's containerd, or into an
archive that `deliver` takes to a cluster of yours (hack/current.py).

Each image is tagged with its package's version (what examples/ and the chart reference): the operator's
is the release's (pyproject.toml, the chart's appVersion: CHANGELOG.md), the trainers' the trainer
runtime's. An image is rebuilt only when the hash of its inputs changes; the hash is kept in a stamp
file in the image cache.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hack import stages
from hack.current import CurrentCluster
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


@contextlib.contextmanager
def _one_at_a_time(layout: Layout, image: Image) -> Iterator[None]:
    """One process at a time builds, imports or exports an image (test workers side by side ask for the
    same image at once: each would otherwise remove the other's import)."""
    layout.images.mkdir(parents=True, exist_ok=True)
    with open(layout.images / f"{image.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure(cluster: Cluster, image: Image) -> str:
    """Build and import `image` unless the node already holds this exact content (a `prebuild` of it is
    imported); returns its ref."""
    with _one_at_a_time(cluster.layout, image):
        return _ensure(cluster, image)


def _ensure(cluster: Cluster, image: Image) -> str:
    with stages.stage(f"import-{image.name}") as this:
        return _import(cluster, image, this)


def _import(cluster: Cluster, image: Image, this: stages.Stage) -> str:
    stamp, digest = _stamp(cluster.layout, image), image.digest()
    held = cluster.node.has_image(image.ref)
    if held and stamp.exists() and stamp.read_text() == digest:
        print(f"[images] {image.ref} up to date ({digest})", flush=True)
        this.cached = True
        return image.ref
    if held:
        # Older content under the tag: gone before the new one comes, so the disk never holds both (GBs
        # for torch).
        cluster.node.remove_image(image.ref)
    prebuilt = _prebuilt(cluster.layout, image, digest)
    if prebuilt.exists():
        cluster.import_image(prebuilt)
        prebuilt.unlink()
    else:
        cluster.build_image(image.root, image.ref, image.root / image.dockerfile)
    stamp.write_text(digest)
    return image.ref


def archive(layout: Layout, image: Image) -> Path:
    """`image` as a docker-archive of its current content: the cache's, else the local cluster's node's
    copy of it, else built."""
    with _one_at_a_time(layout, image):
        return _archive(layout, image)


def _archive(layout: Layout, image: Image) -> Path:
    digest = image.digest()
    target = _prebuilt(layout, image, digest)
    if target.exists():
        print(f"[images] {image.ref} built already ({target.name})", flush=True)
        return target
    layout.images.mkdir(parents=True, exist_ok=True)
    for stale in layout.images.glob(f"{image.name}-{image.version}-*.docker.tar"):
        stale.unlink()  # an earlier content's archive: GBs for torch
    stamp, local = _stamp(layout, image), Cluster(layout)
    if (
        stamp.exists()
        and stamp.read_text() == digest
        and local.procs.running("containerd")
        and local.node.has_image(image.ref)
    ):
        # A local `make demo` or test imported this content: exporting it takes seconds, a build minutes.
        print(f"[images] {image.ref}: the local cluster's copy", flush=True)
        local.node.export_image(image.ref, target)
        return target
    buildah = Buildah(layout)
    built = buildah.build(image.root, image.ref, image.root / image.dockerfile)
    buildah.remove(image.ref)
    return built.rename(target)


def prebuild(layout: Layout, image: Image, cluster: str = "local") -> None:
    """Build `image` into an archive before the cluster runs (the first `make demo` builds its images
    while the Go components build); `ensure` imports it, or `deliver` takes it to a current cluster.
    For the local cluster, nothing to do when this content was imported."""
    with stages.stage(f"image-{image.name}") as this:
        stamp, digest = _stamp(layout, image), image.digest()
        if cluster == "local" and stamp.exists() and stamp.read_text() == digest:
            print(f"[images] {image.ref} imported already", flush=True)
            this.cached = True
            return
        this.cached = _prebuilt(layout, image, digest).exists()  # built by an earlier run, not imported
        archive(layout, image)


def deliver(cluster: Cluster | CurrentCluster, image: Image) -> str:
    """`image` where `cluster`'s nodes find it; returns the reference its pods use."""
    if isinstance(cluster, CurrentCluster):
        return cluster.deliver(archive(cluster.layout, image), image.name, image.version)
    return ensure(cluster, image)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.images")
    parser.add_argument("command", choices=["prebuild"])
    parser.add_argument("names", nargs="+", choices=sorted(IMAGES), metavar="IMAGE")
    parser.add_argument("--cluster", choices=["local", "current"], default="local")
    args = parser.parse_args(argv)
    layout = Layout.from_env()
    for name in args.names:
        prebuild(layout, IMAGES[name], args.cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
