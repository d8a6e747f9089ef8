"""Container images without Docker or a registry.

- pause: a static C binary in a one-layer image written by `oci_archive`.
- base: a Debian rootfs from mmdebstrap (cached by its package list), committed into buildah's storage.
- Dockerfiles: `buildah bud --isolation chroot --storage-driver vfs` with the base as BASE_IMAGE.
Every image is imported into the cluster's containerd under a fixed `localhost/NAME:TAG` reference.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from localcluster.layout import HERE, Layout

PAUSE_IMAGE = "localhost/pause:3.10"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates", "passwd")
DEBIAN_SUITE = "bookworm"
# Docker's default PATH (sbin included: Dockerfiles call useradd) and a UTF-8 locale.
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")


def _log(msg: str) -> None:
    print(f"[images] {msg}", flush=True)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def oci_archive(layer_tar: Path, name: str, out: Path, entrypoint: list[str], user: str = "") -> Path:
    """Write a one-layer OCI image archive that `ctr images import` names `name` (containerd 1.6 reads
    the io.containerd.image.name annotation)."""
    layer_digest = _sha256_file(layer_tar)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "User": user, "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        }
    ).encode()
    config_digest = hashlib.sha256(config).hexdigest()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": f"sha256:{config_digest}",
                       "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{layer_digest}",
                        "size": layer_tar.stat().st_size}],
        }
    ).encode()  # fmt: skip
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "digest": f"sha256:{manifest_digest}", "size": len(manifest),
                           "annotations": {"io.containerd.image.name": name,
                                           "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}],
        }
    ).encode()  # fmt: skip
    with tarfile.open(out, "w") as tar:
        for path, data in (
            ("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
            ("index.json", index),
            (f"blobs/sha256/{config_digest}", config),
            (f"blobs/sha256/{manifest_digest}", manifest),
        ):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.add(layer_tar, arcname=f"blobs/sha256/{layer_digest}")  # fmt: skip
    return out


def unnamed_images(targets: dict[str, str]) -> list[str]:
    """The ID references (`sha256:...`) among containerd's images, given as reference -> target digest,
    whose target no other reference names."""
    named = {target for ref, target in targets.items() if not ref.startswith("sha256:")}
    return sorted(ref for ref, target in targets.items() if ref.startswith("sha256:") and target not in named)


def pause_archive(layout: Layout) -> Path:
    src = HERE / "images" / "pause" / "pause.c"
    key = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    out = layout.images / f"pause-{key}.oci.tar"
    if out.exists():
        return out
    layout.images.mkdir(parents=True, exist_ok=True)
    work = layout.images / f"pause-{key}.work"
    work.mkdir(exist_ok=True)
    subprocess.run(["gcc", "-Os", "-static", "-o", str(work / "pause"), str(src)], check=True)
    subprocess.run(["strip", str(work / "pause")], check=True)
    layer = work / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        tar.add(work / "pause", arcname="pause")
    oci_archive(layer, PAUSE_IMAGE, out, entrypoint=["/pause"], user="65535:65535")
    return out


def base_rootfs(layout: Layout) -> Path:
    """A minimal Debian rootfs with Python, built once per package list (mmdebstrap, ~30 s)."""
    key = hashlib.sha256(f"{DEBIAN_SUITE}:{','.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]
    out = layout.images / f"debian-{DEBIAN_SUITE}-python-{key}.tar"
    if out.exists():
        return out
    layout.images.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    _log(f"building the base rootfs {out.name} with mmdebstrap")
    partial = out.with_suffix(".partial")
    subprocess.run(
        ["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", "--format=tar",
         DEBIAN_SUITE, str(partial), "/etc/apt/sources.list.d/debian.sources"],
        check=True, capture_output=True,
    )  # fmt: skip
    partial.rename(out)
    _log(f"base rootfs ready in {time.monotonic() - start:.0f}s")
    return out


class Buildah:
    """buildah with its own vfs storage under the cache (no daemon, no registry, chroot isolation)."""

    def __init__(self, layout: Layout) -> None:
        self.root = layout.cache / "buildah"
        self.layout = layout

    def _run(self, *args: str, capture: bool = True) -> str:
        cmd = ["buildah", "--root", str(self.root / "root"), "--runroot", str(self.root / "run"),
               "--storage-driver", "vfs", *args]  # fmt: skip
        proc = subprocess.run(cmd, check=False, capture_output=capture, text=True)
        if proc.returncode != 0:
            output = f"{proc.stdout}\n{proc.stderr}" if capture else "(its output is above)"
            raise RuntimeError(f"{' '.join(cmd)} failed: {output}")
        return proc.stdout.strip() if capture else ""

    def has(self, image: str) -> bool:
        try:
            self._run("inspect", "--type", "image", image)
            return True
        except RuntimeError:
            return False

    def remove(self, image: str) -> None:
        self._run("rmi", "--force", image)

    def base_image(self) -> str:
        rootfs = base_rootfs(self.layout)
        config_key = hashlib.sha256("\n".join(BASE_ENV).encode()).hexdigest()[:6]
        image = f"localhost/dtjob-base:{rootfs.stem.rsplit('-', 1)[-1]}-{config_key}"
        if not self.has(image):
            ctr = self._run("from", "scratch")
            self._run("add", ctr, str(rootfs), "/")
            self._run("config", *(arg for env in BASE_ENV for arg in ("--env", env)), ctr)
            self._run("commit", "--rm", ctr, image)
        return image

    def build(self, context: Path, image: str, dockerfile: Path | None = None) -> Path:
        """Build `context`'s Dockerfile on the local base image; return a docker-archive for containerd."""
        start = time.monotonic()
        # A torch image takes about three times its size (~18 GB) while it builds, in vfs storage.
        free = shutil.disk_usage(self.root.parent).free / 2**30
        _log(f"building {image} from {context} ({free:.0f} GiB free under {self.root.parent})")
        base = self.base_image()
        # Package registries are reached through a TLS proxy whose CA only the host's bundle holds:
        # lend that bundle to RUN steps (a build-time mount, never part of the image).
        ca = ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"] if Path(HOST_CA_BUNDLE).exists() else []
        self._run("bud", "--isolation", "chroot", "--layers=false", "--pull=never", *ca,
                  "--build-arg", f"BASE_IMAGE={base}", "-f", str(dockerfile or context / "Dockerfile"),
                  "-t", image, str(context), capture=False)  # fmt: skip
        out = self.layout.images / f"{image.replace('/', '_').replace(':', '_')}.docker.tar"
        out.unlink(missing_ok=True)
        self._run("push", image, f"docker-archive:{out}:{image}")
        _log(f"built {image} from {context} in {time.monotonic() - start:.0f}s")
        return out
