"""A cluster dtjob did not start: a context of the user's kubeconfig (kind, minikube, GKE, ...).

`make demo CLUSTER=current` and `make test-e2e CLUSTER=current` run against it. The project's images
reach its nodes through REGISTRY (pushed with skopeo from the archives `hack.images` builds), or, with no
REGISTRY, through `kind load` or `minikube image load` when the context is a kind or minikube cluster.
kubectl and helm are the ones on PATH, else the build cache's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localcluster.layout import Layout

# Where nodes label their GPU model: GKE, then NVIDIA's GPU feature discovery (GPU operator, kind setups).
GPU_MODEL_LABELS = ("cloud.google.com/gke-accelerator", "nvidia.com/gpu.product")
SPOT_LABEL = "cloud.google.com/gke-spot"
# kwok's simulated nodes advertise GPUs but run no containers.
SIMULATED_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# A registry on the pulling machine itself: containerd talks plain HTTP to it (docker.IsLocalhost).
LOCAL_REGISTRY_HOSTS = ("localhost", "127.0.0.1", "[::1]")


class CurrentClusterError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[current] {msg}", flush=True)


def default_kubeconfig() -> Path:
    """The first file of KUBECONFIG, else ~/.kube/config. kubectl merges every file of KUBECONFIG; this
    reads the first alone, so the context, its cluster and its user must be in that one."""
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return Path(paths[0]) if paths else Path.home() / ".kube" / "config"


def pinned_kubeconfig(context: str | None) -> Path:
    """A private copy of the user's kubeconfig whose current context is `context` (unchanged if None), so
    that every client of a session (the kubernetes client, Kopf's login, kubectl, helm) talks to it."""
    config = yaml.safe_load(default_kubeconfig().read_text())
    if context:
        config["current-context"] = context
    pinned = Path(tempfile.mkdtemp(prefix="dtjob-")) / "kubeconfig"
    pinned.write_text(yaml.safe_dump(config))
    pinned.chmod(0o600)
    return pinned


def tool(name: str, cached: Path) -> Path:
    """`name` from PATH, else the build cache's copy."""
    found = shutil.which(name)
    if found:
        return Path(found)
    if cached.exists():
        return cached
    raise CurrentClusterError(f"{name} is neither on PATH nor built ({cached}); run `make client-tools`")


@dataclass(frozen=True)
class Gpus:
    """What the cluster's GPU nodes offer: the model label (None where no known label names it), and
    whether they are GKE Spot VMs."""

    model: str | None
    per_node: int
    spot: bool = False

    def wire(self, manifest: dict[str, Any]) -> None:
        """Give each pod one GPU: through spec.accelerator where GKE names the model (dtjob then selects the
        pool, tolerates the GPU taint, and the Spot taint where the GPU nodes are Spot VMs, and sets NCCL
        up), else as a plain nvidia.com/gpu limit."""
        if self.model and self.model.startswith("nvidia-"):
            manifest["spec"]["accelerator"] = {"type": self.model, "count": 1, "spot": self.spot}
            return
        for replica in manifest["spec"]["replicas"]:
            for container in replica["template"]["spec"]["containers"]:
                limits = container.setdefault("resources", {}).setdefault("limits", {})
                limits["nvidia.com/gpu"] = 1


@dataclass(frozen=True)
class CurrentCluster:
    kubeconfig: Path
    context: str
    registry: str | None
    layout: Layout

    @classmethod
    def from_kubeconfig(
        cls, context: str | None = None, registry: str | None = None, kubeconfig: Path | None = None
    ) -> CurrentCluster:
        path = kubeconfig or default_kubeconfig()
        if not path.exists():
            raise CurrentClusterError(f"no kubeconfig at {path}: set KUBECONFIG to your cluster's kubeconfig")
        config = yaml.safe_load(path.read_text()) or {}
        chosen = context or config.get("current-context")
        contexts = {c["name"] for c in config.get("contexts") or []}
        if not chosen or chosen not in contexts:
            raise CurrentClusterError(
                f"{path} has no context {chosen!r} (it has: {', '.join(sorted(contexts)) or 'none'}; only the "
                "first file of KUBECONFIG is read)"
            )
        return cls(path, chosen, registry.rstrip("/") if registry else None, Layout.from_env())

    @property
    def kubectl_binary(self) -> Path:
        return tool("kubectl", self.layout.kubectl)

    def helm_command(self) -> list[str]:
        helm = tool("helm", self.layout.binary("helm"))
        return [str(helm), "--kubeconfig", str(self.kubeconfig), "--kube-context", self.context]

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            [str(self.kubectl_binary), "--kubeconfig", str(self.kubeconfig), "--context", self.context, *args],
            input=input, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise CurrentClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    # --- images -------------------------------------------------------------------------------------
    def image_ref(self, name: str, version: str) -> str:
        """The reference the cluster's pods use for one of the project's images."""
        return f"{self.registry}/{name}:{version}" if self.registry else f"localhost/{name}:{version}"

    def deliver(self, archive: Path, name: str, version: str) -> str:
        """Put a docker-archive where the cluster's nodes find it; return the reference pods use."""
        ref = self.image_ref(name, version)
        start = time.monotonic()
        size_mib = archive.stat().st_size / 2**20
        if self.registry:
            host = self.registry.split("/", 1)[0].rsplit(":", 1)[0]
            tls = (
                "false"
                if host in LOCAL_REGISTRY_HOSTS or os.environ.get("REGISTRY_INSECURE") == "1"
                else "true"
            )
            _log(f"pushing {name}:{version} ({size_mib:.0f} MiB unpacked) to {self.registry}")
            # Level 1: the torch image is GBs, and gzip's default level costs minutes more for a few % less.
            self._run(["skopeo", "copy", "--quiet", f"--dest-tls-verify={tls}", "--dest-compress-format",
                       "gzip", "--dest-compress-level", "1", f"docker-archive:{archive}", f"docker://{ref}"])  # fmt: skip
        elif self.context.startswith("kind-"):
            _log(f"loading {ref} into kind cluster {self.context.removeprefix('kind-')}")
            self._run(
                ["kind", "load", "image-archive", str(archive), "--name", self.context.removeprefix("kind-")]
            )
        elif self.context == "minikube" or self._is_minikube():
            _log(f"loading {ref} into minikube profile {self.context}")
            self._run(["minikube", "-p", self.context, "image", "load", str(archive)])
        else:
            raise CurrentClusterError(
                f"context {self.context} is neither kind nor minikube: set REGISTRY=host[:port][/path] to a "
                "registry its nodes pull from (for GKE, an Artifact Registry repository)"
            )
        _log(f"{ref} delivered in {time.monotonic() - start:.0f}s")
        return ref

    def _is_minikube(self) -> bool:
        config = yaml.safe_load(self.kubeconfig.read_text()) or {}
        context = next(c for c in config.get("contexts") or [] if c["name"] == self.context)
        return str(context.get("context", {}).get("cluster", "")) == "minikube"

    @staticmethod
    def _run(cmd: list[str]) -> None:
        if shutil.which(cmd[0]) is None:
            raise CurrentClusterError(f"{cmd[0]} is not on PATH (needed to run {' '.join(cmd[:3])} ...)")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CurrentClusterError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}")

    # --- what the cluster offers --------------------------------------------------------------------
    def gpus(self) -> Gpus | None:
        """The GPUs of the cluster's nodes (those that run containers), None when none offers nvidia.com/gpu."""
        nodes = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        for node in nodes:
            if SIMULATED_NODE_ANNOTATION in (node["metadata"].get("annotations") or {}):
                continue
            count = int(node.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu", "0"))
            if count > 0:
                labels = node["metadata"].get("labels", {})
                model = next((labels[k] for k in GPU_MODEL_LABELS if k in labels), None)
                return Gpus(model, count, labels.get(SPOT_LABEL) == "true")
        return None


def checkpoints_on(manifest: dict[str, Any], claim: str | None) -> None:
    """The job's checkpoints on `claim` (a ReadWriteMany PVC every pod mounts), or, without one, in each
    pod's own emptyDir: this machine can neither prepare nor read a directory on another cluster's nodes,
    and a directory the kubelet creates is root's, which the non-root trainers cannot write."""
    volume = {"persistentVolumeClaim": {"claimName": claim}} if claim else {"emptyDir": {}}
    manifest["spec"]["checkpoint"]["volume"] = volume


def localize(manifest: dict[str, Any], refs: dict[str, str]) -> dict[str, Any]:
    """The job's containers with the project's local image references replaced by the delivered ones."""
    for replica in manifest["spec"]["replicas"]:
        spec = replica["template"]["spec"]
        for container in (*spec.get("initContainers", []), *spec["containers"]):
            if container.get("image") in refs:
                container["image"] = refs[container["image"]]
    return manifest
