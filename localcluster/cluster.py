"""The cluster as a whole: bring tiers up incrementally, report status, tear everything down."""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localcluster import controlplane, fakenodes, hostnet, images, kueue
from localcluster.layout import HERE, REAL_NODES, Layout
from localcluster.node import COMPONENTS as NODE_COMPONENTS
from localcluster.node import Node
from localcluster.procs import ProcessError, Processes

# Tools each tier needs built.
TOOLS = {"A": ("etcd", "k8s"), "B": ("etcd", "k8s", "kwok"), "C": ("etcd", "k8s", "kwok", "coredns")}
TIER_COMPONENTS = {
    "A": controlplane.COMPONENTS,
    "B": (*controlplane.COMPONENTS, "kwok"),
    "C": (*controlplane.COMPONENTS, "kwok", *NODE_COMPONENTS),
}
# Optional components on top of tier B or C (`up --addons kueue`): each is a tool to build and a process.
ADDONS = ("kueue",)


class ClusterError(RuntimeError):
    pass


class Tier(enum.StrEnum):
    A = "A"
    B = "B"
    C = "C"


def _log(msg: str) -> None:
    print(f"[cluster] {msg}", flush=True)


class Cluster:
    def __init__(self, layout: Layout | None = None) -> None:
        self.layout = layout or Layout.from_env()
        self.procs = Processes(self.layout)
        self.nodes = tuple(Node(self.layout, self.procs, real) for real in REAL_NODES)
        self.node = self.nodes[0]

    # --- queries --------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig()

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            [str(self.layout.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def helm_command(self) -> list[str]:
        """helm against this cluster (the same method as a cluster of yours has: hack/current.py)."""
        return [str(self.layout.binary("helm")), "--kubeconfig", str(self.kubeconfig)]

    def running_tier(self) -> Tier | None:
        """The highest tier whose every component runs."""
        up = None
        for tier in Tier:
            if all(self.procs.running(c) for c in TIER_COMPONENTS[tier]):
                up = tier
        return up

    def status(self) -> dict[str, object]:
        every = (*TIER_COMPONENTS["C"], *ADDONS)
        return {
            "tier": self.running_tier(),
            "components": {c: self.procs.pid(c) for c in every},
            "kubeconfig": str(self.kubeconfig),
            "logs": str(self.layout.logs),
        }

    def check_alive(self) -> None:
        """Fail loudly, with log tails, if a component that was started has died (a node taken away on
        purpose, `lose_node`, is not)."""
        other_nodes = (name for node in self.nodes[1:] for name in node.processes)
        dead = [
            c
            for c in (*TIER_COMPONENTS["C"], *ADDONS, *other_nodes)
            if (self.layout.pids / f"{c}.pid").exists() and not self.procs.running(c)
        ]
        if dead:
            from localcluster.procs import log_tail

            tails = "\n".join(f"--- {c}:\n{log_tail(self.procs.log(c))}" for c in dead)
            raise ClusterError(f"cluster components died: {', '.join(dead)}\n{tails}")

    # --- lifecycle ------------------------------------------------------------------------------------
    def build(
        self, tier: Tier, with_helm: bool = False, addons: tuple[str, ...] = (), fake_nodes: int = 200
    ) -> None:
        """`fake_nodes` 0: no kwok (a tier C for the real node alone, as the demo runs)."""
        tools = [t for t in TOOLS[tier] if fake_nodes or t != "kwok"]
        tools += [*(["helm"] if with_helm else []), *addons]
        subprocess.run([str(HERE / "build.sh"), *tools], check=True,
                       env={**os.environ, "DTJOB_CACHE": str(self.layout.cache)})  # fmt: skip

    def up(
        self, tier: Tier = Tier.C, fake_nodes: int = 200, addons: tuple[str, ...] = (), real_nodes: int = 1
    ) -> None:
        """`real_nodes` 2: tier C with a second real node (`start_node`)."""
        tier = Tier(tier)
        if not 1 <= real_nodes <= len(self.nodes):
            raise ClusterError(f"--real-nodes is 1 to {len(self.nodes)}, not {real_nodes}")
        if real_nodes > 1 and tier < Tier.C:
            raise ClusterError(f"a second real node is tier C, not {tier}")
        if unknown := set(addons) - set(ADDONS):
            raise ClusterError(
                f"unknown addon(s) {', '.join(sorted(unknown))}; there are: {', '.join(ADDONS)}"
            )
        if addons and tier < Tier.B:
            raise ClusterError(f"addons run on tier B or C, not {tier}")
        if addons and not fake_nodes:
            raise ClusterError("addons need kwok's fake nodes: --fake-nodes 0 runs none")
        self.build(tier, addons=addons, fake_nodes=fake_nodes)
        with self._one_lifecycle_step():
            self._up(tier, fake_nodes, addons, real_nodes)

    @contextlib.contextmanager
    def _one_lifecycle_step(self) -> Iterator[None]:
        """One `up` or `down` at a time on this machine (test processes side by side, a user's `make
        cluster-up`): two would start every component twice. A file lock in the cache, which `down` keeps."""
        self.layout.cache.mkdir(parents=True, exist_ok=True)
        with open(self.layout.cache / "cluster.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _up(self, tier: Tier, fake_nodes: int, addons: tuple[str, ...], real_nodes: int) -> None:
        try:
            self.check_alive()
        except ClusterError as err:  # `up` restarts what died, after saying so
            _log(f"restarting dead components: {err}")
        started = time.monotonic()
        self.layout.state.mkdir(parents=True, exist_ok=True)
        hostnet.add_loopback_aliases()
        from localcluster.pki import ensure_pki

        ensure_pki(self.layout)
        try:
            step = time.monotonic()
            controlplane.start(self.layout, self.procs)
            _log(f"tier A (control plane) ready in {time.monotonic() - step:.1f}s")
            if tier >= Tier.B and fake_nodes:
                step = time.monotonic()
                fakenodes.start(self.layout, self.procs)
                fakenodes.apply_nodes(self.layout, fakenodes.fleet(fake_nodes))
                self.wait_nodes_ready(fake_nodes, label="type=kwok", timeout=120)
                self.wait_schedulable("type=kwok", timeout=120)
                _log(
                    f"tier B (kwok, {fake_nodes} fake GPU nodes Ready) ready in {time.monotonic() - step:.1f}s"
                )
            if tier >= Tier.C:
                step = time.monotonic()
                self._up_node()
                _log(f"tier C (real node, DNS, kube-proxy) ready in {time.monotonic() - step:.1f}s")
                for node in self.nodes[1:real_nodes]:
                    self.start_node(node)
            if "kueue" in addons:
                self.up_kueue()
        except ProcessError as err:
            raise ClusterError(str(err)) from err
        _log(f"tier {tier} up in {time.monotonic() - started:.1f}s; KUBECONFIG={self.kubeconfig}")

    def up_kueue(self) -> None:
        step = time.monotonic()
        kueue.start(self.layout, self.procs, self.kubectl)
        _log(f"kueue (webhooks at 127.0.0.1:{kueue.WEBHOOK_PORT}) ready in {time.monotonic() - step:.1f}s")

    def down_kueue(self) -> None:
        """Kueue stopped and its webhooks unregistered; its CRDs and objects stay (as after an uninstall)."""
        kueue.stop(self.procs, self.kubectl)

    def _up_node(self) -> None:
        hostnet.prepare_for_pods()
        self.node.dir.mkdir(parents=True, exist_ok=True)
        self.node.start(before_kubelet=lambda: self._import_pause(self.node))
        self.wait_node_ready(self.node.real.name, timeout=120)
        self.wait_node_schedulable(self.node.real.name, timeout=120)

    def _import_pause(self, node: Node) -> None:
        # containerd must already hold the sandbox image when the kubelet asks for one: nothing can pull it.
        if not node.has_image(images.PAUSE_IMAGE):
            node.import_image(images.pause_archive(self.layout))

    def start_node(self, node: Node) -> None:
        """Another real node (tier C must be up), or the same one back after `lose_node`: a replacement
        machine of the same name. It holds the images it was given (`share_image`) before."""
        step = time.monotonic()
        node.start(before_kubelet=lambda: self._import_pause(node))
        self.wait_node_ready(node.real.name, timeout=120)
        _log(f"real node {node.real.name} ready in {time.monotonic() - step:.1f}s")

    def lose_node(self, node: Node) -> None:
        """`node` gone at once, as a VM that vanished (`Node.lose`)."""
        node.lose()

    def shut_down_node(self, node: Node) -> None:
        """`node`'s graceful shutdown begins, as a Spot VM's reclaim notice starts it (`Node.shut_down`);
        `lose_node` ends the machine."""
        node.shut_down()

    def share_image(self, ref: str) -> None:
        """The first real node's image `ref`, in every other running real node's containerd too (copied
        once a content: minutes for torch; kept across `down`/`up` as the first node's images are)."""
        digest = self.node.image_targets()[ref]
        for node in self.nodes[1:]:
            if not self.procs.running(node.containerd) or node.image_targets().get(ref) == digest:
                continue
            step = time.monotonic()
            if node.has_image(ref):
                node.remove_image(ref)  # the old content first: the disk never holds both
            node.import_from(self.node, ref)
            _log(f"{ref} copied to {node.real.name} in {time.monotonic() - step:.1f}s")

    def import_image(self, archive: Path) -> None:
        self.node.import_image(archive)

    def build_image(self, context: Path, image: str, dockerfile: Path | None = None) -> None:
        """Build a Dockerfile into the cluster's containerd (no Docker, no registry)."""
        buildah = images.Buildah(self.layout)
        archive = buildah.build(context, image, dockerfile)
        self.import_image(archive)
        # containerd's store is the copy that counts; the others would only fill the disk (GBs for torch).
        archive.unlink()
        buildah.remove(image)

    def wait_node_ready(self, name: str, timeout: float) -> None:
        """Wait until the kubelet has registered node `name` and it is Ready (`kubectl wait` fails at once
        on a node not registered yet, which a kubelet under load may not have done)."""
        self.wait_nodes_ready(1, f"kubernetes.io/hostname={name}", timeout)

    def wait_nodes_ready(self, count: int, label: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        ready = 0
        while time.monotonic() < deadline:
            nodes = json.loads(self.kubectl("get", "nodes", "-l", label, "-o", "json"))["items"]
            ready = sum(1 for n in nodes if _ready(n))
            if ready >= count:
                return
            self.check_alive()
            time.sleep(0.5)
        raise ClusterError(f"only {ready}/{count} nodes with {label} Ready after {timeout:.0f}s")

    def wait_node_schedulable(self, name: str, timeout: float) -> None:
        """Wait until the node lifecycle controller has lifted the not-ready taint of a new node."""
        self.wait_schedulable(f"kubernetes.io/hostname={name}", timeout)

    def wait_schedulable(self, label: str, timeout: float) -> None:
        """Wait until no node with `label` has a node.kubernetes.io taint (the not-ready one a new node is
        given until the node lifecycle controller has seen it Ready): pods can be placed there."""
        deadline, tainted = time.monotonic() + timeout, list[str]()
        while time.monotonic() < deadline:
            if not (tainted := self.tainted_nodes(label)):
                return
            time.sleep(0.2)
        raise ClusterError(
            f"nodes {', '.join(tainted[:5])} still have node.kubernetes.io taints after {timeout:.0f}s"
        )

    def tainted_nodes(self, label: str = "") -> list[str]:
        """The nodes (with `label`, if given) that carry a node.kubernetes.io taint."""
        selector = ("-l", label) if label else ()
        nodes = json.loads(self.kubectl("get", "nodes", *selector, "-o", "json"))["items"]
        return [
            n["metadata"]["name"]
            for n in nodes
            if any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints", []))
        ]

    def restart_component(self, name: str, down_seconds: float = 0.0) -> None:
        """A control-plane outage: etcd or kube-apiserver crashes (SIGKILL), stays down `down_seconds`,
        comes back as it was started; returns once it is ready again."""
        self.procs.restart(name, down_seconds)
        controlplane.wait_ready(self.layout, self.procs, name)
        if name == "etcd":  # the apiserver reconnects by itself; wait until it serves again
            controlplane.wait_ready(self.layout, self.procs, "kube-apiserver")

    def down(self) -> None:
        with self._one_lifecycle_step():
            self._down()

    def _down(self) -> None:
        started = time.monotonic()
        if self.procs.running("kube-apiserver") and self.procs.running("kubelet"):
            # Let the kubelet tear pods down (CNI DEL, unmounts) while it still can.
            self.kubectl("delete", "pods", "--all-namespaces", "--all", "--grace-period=0", "--force",
                         "--wait=false", check=False)  # fmt: skip
            self._wait_no_real_pods(timeout=30)
        for node in reversed(self.nodes):
            node.stop()
        kueue.remove_host_files()
        for name in ("kueue", "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self.procs.stop(name)
        hostnet.undo_pod_networking()
        hostnet.remove_loopback_aliases()
        shutil.rmtree(self.layout.state, ignore_errors=True)
        _log(f"down in {time.monotonic() - started:.1f}s")

    def _wait_no_real_pods(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [n.real.name for n in self.nodes if self.procs.running(n.kubelet)]
            out = "".join(
                self.kubectl(
                    "get",
                    "pods",
                    "-A",
                    "--field-selector",
                    f"spec.nodeName={name}",
                    "-o",
                    "name",
                    check=False,
                )
                for name in live
            )
            if not out.strip():
                return
            time.sleep(0.5)


def _ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
