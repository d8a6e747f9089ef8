"""Tier C: a real node — containerd + runc, a bridge CNI and a kubelet; the first one also runs the
machine's kube-proxy and CoreDNS, which serve every node's pods."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from localcluster.images import PAUSE_IMAGE, unnamed_images
from localcluster.layout import DNS_IP, HERE, POD_CIDR, REAL_NODES, Layout, RealNode, write_if_changed
from localcluster.procs import Processes

COMPONENTS = ("containerd", "kubelet", "kube-proxy", "coredns")
NODE_LABEL = "dtjob.io/local-node"
CGROUPS = Path("/sys/fs/cgroup")
# GKE's graceful node shutdown of a Spot VM: 30 s, the last 15 s for critical pods
# (../shared/reference/platform-facts.md 2.1, GKE's Spot VM docs, 2026-11-23).
SHUTDOWN_GRACE_SECONDS = 30


class Node:
    def __init__(self, layout: Layout, procs: Processes, real: RealNode = REAL_NODES[0]) -> None:
        self.layout = layout
        self.procs = procs
        self.real = real
        self.first = real == REAL_NODES[0]
        self.dir = layout.state / real.directory
        # Imported images are kept across `down`/`up` (nothing can re-pull them); containers are not.
        self.containerd_root = layout.cache / ("containerd" if self.first else f"containerd-{real.name}")
        self.socket = self.dir / "containerd.sock"
        self.cni_conf_dir = self.dir / "cni"
        self.kubelet_root = self.dir / "kubelet"
        # The first node's processes keep the names they always had (pid files, logs, tier checks).
        suffix = "" if self.first else f"-{real.name}"
        self.containerd, self.kubelet = f"containerd{suffix}", f"kubelet{suffix}"
        self.dbus, self.logind = f"dbus{suffix}", f"logind{suffix}"

    @property
    def processes(self) -> tuple[str, ...]:
        """This node's own processes (not the machine's kube-proxy and CoreDNS), the kubelet first."""
        return (
            (self.kubelet, self.containerd)
            if self.first
            else (self.kubelet, self.containerd, self.logind, self.dbus)
        )

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
        if self.first:
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
        self.procs.start(self.containerd, ["containerd", "--config", conf])
        self.procs.wait_until(
            self.containerd, lambda: self.ctr("version").returncode == 0, "containerd socket"
        )

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", "--no-unpack=false", str(archive))
        self._remove_unnamed_images()

    def import_from(self, source: Node, ref: str) -> None:
        """`source`'s image `ref`, streamed from its containerd into this one."""
        export = subprocess.Popen(
            ["ctr", "--address", str(source.socket), "-n", "k8s.io", "images", "export", "-", ref],
            stdout=subprocess.PIPE,
        )
        assert export.stdout is not None
        imported = subprocess.run(
            ["ctr", "--address", str(self.socket), "-n", "k8s.io", "images", "import", "-"],
            stdin=export.stdout, capture_output=True, text=True,
        )  # fmt: skip
        export.stdout.close()
        if export.wait() != 0 or imported.returncode != 0:
            raise subprocess.CalledProcessError(
                imported.returncode, imported.args, imported.stdout, imported.stderr
            )
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
                {"type": "bridge", "bridge": self.real.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": self.real.pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}],
                          "dataDir": str(self.dir / "cni-ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }  # fmt: skip
        write_if_changed(self.cni_conf_dir / "10-dtjob.conflist", json.dumps(conflist, indent=2))

    # --- kubelet --------------------------------------------------------------------------------------
    def _start_kubelet(self) -> None:
        resolv = self.dir / "resolv.conf"
        write_if_changed(resolv, f"nameserver {DNS_IP}\n")
        # Another node's kubelet keeps its pods' cgroups and logs apart from the first's (each removes
        # what it finds there of pods it does not know), and shuts down gracefully when its logind says
        # so, as a GKE node does in a Spot VM's 30 s notice (15 s of it for pods that are not critical).
        apart = (
            ""
            if self.first
            else f"cgroupRoot: {self.real.cgroup_root}\npodLogsDir: {self.dir / 'pod-logs'}\n"
            f"shutdownGracePeriod: {SHUTDOWN_GRACE_SECONDS}s\nshutdownGracePeriodCriticalPods: 15s\n"
        )
        env = {}
        if not self.first:
            self._make_cgroup_root()
            env["DBUS_SYSTEM_BUS_ADDRESS"] = self._start_logind()
        conf = self.dir / "kubelet.yaml"
        write_if_changed(
            conf,
            f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {self.real.ip}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {self.real.kubelet_healthz_port}
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
{apart}""",
        )
        kubeconfig = self.layout.kubeconfig("kubelet" if self.first else f"kubelet-{self.real.name}")
        self.procs.start(
            self.kubelet,
            [self.layout.binary("k8s", "kubelet"), f"--config={conf}", f"--kubeconfig={kubeconfig}",
             f"--hostname-override={self.real.name}", f"--node-ip={self.real.ip}", f"--root-dir={self.kubelet_root}",
             f"--pod-infra-container-image={PAUSE_IMAGE}", f"--node-labels={NODE_LABEL}=true", "--v=1"],
            env,
        )  # fmt: skip
        healthz = f"http://127.0.0.1:{self.real.kubelet_healthz_port}/healthz"
        self.procs.wait_until(
            self.kubelet, lambda: urllib.request.urlopen(healthz, timeout=2).status == 200,
            "kubelet /healthz", timeout=90,
        )  # fmt: skip

    # --- logind, for the kubelet's graceful node shutdown -----------------------------------------------
    def _start_logind(self) -> str:
        """A D-Bus bus of this node's own and logind's stand-in on it (localcluster/logind.py); its
        address, for the kubelet."""
        socket = self.dir / "dbus.sock"
        conf = write_if_changed(
            self.dir / "dbus.conf",
            f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>
  </policy>
</busconfig>
""",
        )
        if not self.procs.running(self.dbus):
            socket.unlink(missing_ok=True)  # a bus killed with its node leaves its socket
            self.procs.start(self.dbus, ["dbus-daemon", f"--config-file={conf}", "--nofork", "--nopidfile"])
            self.procs.wait_until(self.dbus, socket.exists, "the D-Bus socket")
        address = f"unix:path={socket}"
        if not self.procs.running(self.logind):
            # Its log is kept across restarts: wait for this one's line (the kubelet reads logind once).
            served = self._logind_events().count("serving")
            self.procs.start(
                self.logind,
                [sys.executable, "-m", "localcluster.logind", address, str(SHUTDOWN_GRACE_SECONDS)],
                {"PYTHONPATH": str(HERE.parent)},
            )
            self.procs.wait_until(
                self.logind, lambda: self._logind_events().count("serving") > served, "logind on the bus"
            )
        return address

    def shut_down(self) -> None:
        """The node's graceful shutdown, as a Spot VM's reclaim notice starts it: logind announces it
        once the kubelet holds its inhibitor lock; the kubelet then stops the pods (SIGTERM, their grace
        within 15 s), marks them Failed with DisruptionTarget TerminationByKubelet and the node NotReady.
        The machine itself stays until `lose`."""
        if self.first:
            raise ValueError("the first real node has no graceful shutdown (no logind of its own)")

        def locked() -> bool:  # since logind last started, the kubelet took a lock and no shutdown came
            events = self._logind_events()
            since = events[len(events) - events[::-1].index("serving") :] if "serving" in events else []
            return bool(since) and since[-1] == "lock"

        self.procs.wait_until(self.logind, locked, "the kubelet's inhibitor lock")
        pid = self.procs.pid(self.logind)
        assert pid is not None
        os.kill(pid, signal.SIGUSR1)

    def _logind_events(self) -> list[str]:
        """What logind's log says happened, in order: "serving", "lock", "shutdown"."""
        log = self.procs.log(self.logind)
        lines = log.read_text().splitlines() if log.exists() else []
        kinds = (("serving ", "serving"), (" lock on ", "lock"), ("PrepareForShutdown(true)", "shutdown"))
        return [kind for line in lines for marker, kind in kinds if marker in line]

    def _cgroup_roots(self) -> list[Path]:
        """This node's cgroup root in every hierarchy of the machine (cgroup v1: one a controller)."""
        below = self.real.cgroup_root.strip("/")
        if (CGROUPS / "cgroup.controllers").exists():  # cgroup v2: one hierarchy
            return [CGROUPS / below]
        return [h / below for h in sorted(CGROUPS.iterdir()) if h.is_dir()]

    def _make_cgroup_root(self) -> None:
        for root in self._cgroup_roots():
            root.mkdir(exist_ok=True)
            if root.parent.name == "cpuset":  # a cpuset cgroup takes no task until it has CPUs and memory
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    (root / knob).write_text((root.parent / knob).read_text())

    def _remove_cgroup_root(self) -> None:
        for root in self._cgroup_roots():
            if root.is_dir():
                for cgroup in sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
                    cgroup.rmdir()
                root.rmdir()

    # --- kube-proxy -----------------------------------------------------------------------------------
    def _start_kube_proxy(self) -> None:
        conf = self.dir / "kube-proxy.yaml"
        write_if_changed(
            conf,
            f"""apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {self.layout.kubeconfig("kube-proxy")}}}
hostnameOverride: {self.real.name}
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
        write_if_changed(corefile, coredns_config(self.layout.kubeconfig()))
        self.procs.start("coredns", [self.layout.binary("coredns"), "-conf", corefile])
        self.procs.wait_until(
            "coredns", lambda: urllib.request.urlopen("http://127.0.0.1:8181/ready", timeout=2).status == 200,
            "CoreDNS /ready", timeout=60,
        )  # fmt: skip

    # --- teardown -------------------------------------------------------------------------------------
    def stop(self) -> None:
        if self.first:
            self.procs.stop("coredns")
        self.procs.stop(self.kubelet)
        if self.procs.running(self.containerd):
            # Sandboxes and containers outlive containerd in their shims: remove them through it first.
            for task in self.ctr("tasks", "ls", "-q", check=False).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
                self.ctr("tasks", "delete", "-f", task, check=False)
            for container in self.ctr("containers", "ls", "-q", check=False).stdout.split():
                self.ctr("containers", "delete", container, check=False)
        self.procs.stop(self.containerd)
        if self.first and (self.procs.running("kube-proxy") or (self.dir / "kube-proxy.yaml").exists()):
            self.procs.stop("kube-proxy")
            subprocess.run([str(self.layout.binary("k8s", "kube-proxy")), "--cleanup"], capture_output=True)
        self._unmount_under(self.kubelet_root)
        self._unmount_under(self.dir)
        if self.first:
            for netns in Path("/var/run/netns").glob("cni-*"):
                subprocess.run(["ip", "netns", "delete", netns.name], capture_output=True)
        else:
            self.procs.stop(self.logind)
            self.procs.stop(self.dbus)
            self._kill_pods()
            self._remove_cgroup_root()

    def lose(self) -> None:
        """The node is gone at once, as a VM that vanished: its kubelet, containerd and every process of
        its pods are killed (SIGKILL), and the API is told nothing: its Node stays Ready until the node
        lifecycle controller misses its heartbeats. The machine-wide services the first node runs
        (kube-proxy, CoreDNS) stay. `Cluster.start_node` brings it back (a replacement machine)."""
        for process in self.processes:
            self.procs.kill(process)
        self._kill_pods()

    def _kill_pods(self) -> None:
        """SIGKILL this node's shims and its pods' processes (under its kubelet's kubepods cgroup)."""
        shims = subprocess.run(["pgrep", "-f", f"containerd-shim.* -address {self.socket}"],
                               capture_output=True, text=True).stdout.split()  # fmt: skip
        pods = {
            pid
            for root in self._cgroup_roots()
            for procs in (root / "kubepods").rglob("cgroup.procs")
            for pid in procs.read_text().split()
        }
        for pid in (*shims, *pods):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

    @staticmethod
    def _unmount_under(root: Path) -> None:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)


def coredns_config(kubeconfig: Path) -> str:
    """The cluster's Corefile. Its plugins must be among those localcluster/gomod/cluster/coredns/main.go
    builds in (a unit test checks). No `forward`: names outside cluster.local fail fast instead of leaving
    the machine."""
    return f""".:53 {{
    bind {DNS_IP}
    errors
    health 127.0.0.1:8081
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loop
}}
"""
