"""Tier C: one real node — containerd + runc, a bridge CNI, kubelet, kube-proxy and CoreDNS."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

from localcluster.images import PAUSE_IMAGE, unnamed_images
from localcluster.layout import (
    DNS_IP,
    NODE_IP,
    POD_BRIDGE,
    POD_CIDR,
    REAL_NODE_NAME,
    Layout,
    write_if_changed,
)
from localcluster.procs import Processes

COMPONENTS = ("containerd", "kubelet", "kube-proxy", "coredns")
NODE_LABEL = "dtjob.io/local-node"


class Node:
    def __init__(self, layout: Layout, procs: Processes) -> None:
        self.layout = layout
        self.procs = procs
        self.dir = layout.state / "node"
        # Imported images are kept across `down`/`up` (nothing can re-pull them); containers are not.
        self.containerd_root = layout.cache / "containerd"
        self.socket = self.dir / "containerd.sock"
        self.cni_conf_dir = self.dir / "cni"
        self.kubelet_root = self.dir / "kubelet"

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", *args],
            check=check,
            capture_output=True,
            text=True,
        )

    def start(self, before_kubelet: Callable[[], None]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._start_containerd()
        before_kubelet()
        self._write_cni()
        self._start_kubelet()
        self._start_kube_proxy()
        self._start_coredns()

    # --- containerd -----------------------------------------------------------------------------------
    def _start_containerd(self) -> None:
        conf = self.dir / "containerd.toml"
        write_if_changed(
            conf,
            f"""version = 2
root = "{self.containerd_root}"
state = "{self.dir / "containerd-state"}"
[grpc]
  address = "{self.socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # The kubelet asks for oom_score_adj -998 on sandboxes; root here may not lower it (no CAP_SYS_RESOURCE
  # over the VM's init), so runc failed with "failed to update /proc/self/oom_score_adj". Clamp instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{self.cni_conf_dir}"
""",
        )
        self.procs.start("containerd", ["containerd", "--config", conf])
        self.procs.wait_until("containerd", lambda: self.ctr("version").returncode == 0, "containerd socket")

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", "--no-unpack=false", str(archive))
        self._remove_unnamed_images()

    def remove_image(self, ref: str) -> None:
        self.ctr("images", "rm", "--sync", ref)
        self._remove_unnamed_images()

    def _remove_unnamed_images(self) -> None:
        # The CRI plugin gives every image it sees a second reference, its ID (sha256:...). When a rebuilt
        # image takes the tag, that reference alone keeps the old content: 12 GB a torch image, which
        # filled the disk after a few rebuilds.
        if stale := unnamed_images(self.image_targets()):
            self.ctr("images", "rm", "--sync", *stale)

    def image_targets(self) -> dict[str, str]:
        """Every image reference in containerd, with the digest it points to."""
        rows = self.ctr("images", "ls").stdout.splitlines()[1:]  # REF TYPE DIGEST SIZE ...
        return {row.split()[0]: row.split()[2] for row in rows if row.strip()}

    def export_image(self, ref: str, archive: Path) -> None:
        """`ref` as an image archive (OCI, with Docker's manifest.json: skopeo's docker-archive reads it)."""
        partial = archive.with_suffix(".partial")
        self.ctr("images", "export", str(partial), ref)
        partial.rename(archive)

    def has_image(self, ref: str) -> bool:
        return ref in self.ctr("images", "ls", "-q").stdout.split()

    # --- CNI ------------------------------------------------------------------------------------------
    def _write_cni(self) -> None:
        self.cni_conf_dir.mkdir(parents=True, exist_ok=True)
        conflist = {
            "cniVersion": "1.0.0",
            "name": "dtjob-local",
            "plugins": [
                {"type": "bridge", "bridge": POD_BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}],
                          "dataDir": str(self.dir / "cni-ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }  # fmt: skip
        write_if_changed(self.cni_conf_dir / "10-dtjob.conflist", json.dumps(conflist, indent=2))

    # --- kubelet --------------------------------------------------------------------------------------
    def _start_kubelet(self) -> None:
        resolv = self.dir / "resolv.conf"
        write_if_changed(resolv, f"nameserver {DNS_IP}\n")
        conf = self.dir / "kubelet.yaml"
        write_if_changed(
            conf,
            f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://{self.socket}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
clusterDNS: [{DNS_IP}]
clusterDomain: cluster.local
resolvConf: {resolv}
authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: true}}, x509: {{clientCAFile: {self.layout.pki}/ca.crt}}}}
authorization: {{mode: Webhook}}
rotateCertificates: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "100Mi", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}}
maxPods: 110
runtimeRequestTimeout: 10m
""",
        )
        self.procs.start(
            "kubelet",
            [self.layout.binary("k8s", "kubelet"), f"--config={conf}", f"--kubeconfig={self.layout.kubeconfig('kubelet')}",
             f"--hostname-override={REAL_NODE_NAME}", f"--node-ip={NODE_IP}", f"--root-dir={self.kubelet_root}",
             f"--pod-infra-container-image={PAUSE_IMAGE}", f"--node-labels={NODE_LABEL}=true", "--v=1"],
        )  # fmt: skip
        self.procs.wait_until(
            "kubelet", lambda: urllib.request.urlopen("http://127.0.0.1:10248/healthz", timeout=2).status == 200,
            "kubelet /healthz", timeout=90,
        )  # fmt: skip

    # --- kube-proxy -----------------------------------------------------------------------------------
    def _start_kube_proxy(self) -> None:
        conf = self.dir / "kube-proxy.yaml"
        write_if_changed(
            conf,
            f"""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {self.layout.kubeconfig("kube-proxy")}}}
hostnameOverride: {REAL_NODE_NAME}
mode: iptables
clusterCIDR: {POD_CIDR}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {{maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
""",
        )
        self.procs.start("kube-proxy", [self.layout.binary("k8s", "kube-proxy"), f"--config={conf}"])
        self.procs.wait_until(
            "kube-proxy", lambda: urllib.request.urlopen("http://127.0.0.1:10256/healthz", timeout=2).status == 200,
            "kube-proxy /healthz", timeout=60,
        )  # fmt: skip

    # --- CoreDNS --------------------------------------------------------------------------------------
    def _start_coredns(self) -> None:
        corefile = self.dir / "Corefile"
        # No `forward`: names outside cluster.local fail fast instead of leaving the machine.
        write_if_changed(
            corefile,
            f""".:53 {{
    bind {DNS_IP}
    errors
    health 127.0.0.1:8081
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {self.layout.kubeconfig()}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loop
}}
""",
        )
        self.procs.start("coredns", [self.layout.binary("coredns"), "-conf", corefile])
        self.procs.wait_until(
            "coredns", lambda: urllib.request.urlopen("http://127.0.0.1:8181/ready", timeout=2).status == 200,
            "CoreDNS /ready", timeout=60,
        )  # fmt: skip

    # --- teardown -------------------------------------------------------------------------------------
    def stop(self) -> None:
        self.procs.stop("coredns")
        self.procs.stop("kubelet")
        if self.procs.running("containerd"):
            # Sandboxes and containers outlive containerd in their shims: remove them through it first.
            for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
                self.ctr("tasks", "delete", "-f", task, check=False)
            for container in self.ctr("containers", "ls", "-q", check=False).stdout.split():
                self.ctr("containers", "delete", container, check=False)
        self.procs.stop("containerd")
        if self.procs.running("kube-proxy") or (self.dir / "kube-proxy.yaml").exists():
            self.procs.stop("kube-proxy")
            subprocess.run([str(self.layout.binary("k8s", "kube-proxy")), "--cleanup"], capture_output=True)
        self._unmount_under(self.kubelet_root)
        self._unmount_under(self.dir)
        for netns in Path("/var/run/netns").glob("cni-*"):
            subprocess.run(["ip", "netns", "delete", netns.name], capture_output=True)

    @staticmethod
    def _unmount_under(root: Path) -> None:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)
