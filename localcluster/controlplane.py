"""Tier A: etcd, kube-apiserver, kube-controller-manager and kube-scheduler as local processes."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Final

from localcluster.layout import (
    APISERVER_PORT,
    ETCD_PEER_PORT,
    ETCD_PORT,
    NODE_IP,
    SERVICE_CIDR,
    Layout,
    write_if_changed,
)
from localcluster.procs import Processes

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
ETCD_METRICS: Final = f"http://127.0.0.1:{ETCD_PORT}/metrics"


def etcd_database(metrics: str) -> tuple[int, int] | None:
    """etcd's database file size and its quota, in bytes, from its /metrics text. Past the quota etcd
    refuses every write ("mvcc: database space exceeded") and the whole cluster with it; compaction frees
    space inside the file but never shrinks it."""
    # A regex, not prometheus_client's parser: `make build` imports localcluster with the system Python,
    # before the venv exists (tests/unit/test_system_python.py).
    found = [
        re.search(rf"^{name} ([0-9.e+]+)$", metrics, re.MULTILINE)
        for name in ("etcd_mvcc_db_total_size_in_bytes", "etcd_server_quota_backend_bytes")
    ]
    size, quota = (int(float(m.group(1))) if m else None for m in found)
    return (size, quota) if size is not None and quota is not None else None


def read_etcd_database() -> tuple[int, int] | None:
    """`etcd_database` of the running etcd; None when none answers."""
    try:
        with urllib.request.urlopen(ETCD_METRICS, timeout=5) as response:
            return etcd_database(response.read().decode())
    except OSError:
        return None


def kubectl_ok(layout: Layout, *args: str) -> bool:
    return (
        subprocess.run(
            [str(layout.kubectl), "--kubeconfig", str(layout.kubeconfig()), *args],
            capture_output=True,
            timeout=20,
        ).returncode
        == 0
    )


# Who wrote what, and when: the writes to the objects the operator owns, not their status updates by
# kubelets and kwok (subresources are not matched by their resource). Tests read it to prove that a
# deposed leader wrote nothing after the takeover (the operator's user agent names its replica).
AUDIT_POLICY: Final = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
  resources:
  - {group: "", resources: [pods, services, events]}
  - {group: networking.k8s.io, resources: [networkpolicies]}
  - {group: training.dtjob.io, resources: [distributedtrainingjobs, distributedtrainingjobs/status]}
- level: None
"""


# A node is taken for lost when its Lease has not been renewed for this long. kwok renews the fake nodes'
# every 40 s (fakenodes.LEASE_SECONDS / 4): the default 50 s would turn a fake node NotReady whenever kwok
# is a few seconds late on a loaded machine. Three renewals, as the kubelet's 10 s against the old 40 s
# default is four; the real nodes' kubelets renew every 10 s and are unaffected but for a slower verdict.
NODE_MONITOR_GRACE: Final = "120s"
# The controller-manager's own client rate (default 20 requests/s, burst 30): its node lifecycle controller
# lifts each new node's not-ready taint with a call of its own, so 200 fake nodes and the real one came
# out of it at ~5 a second, the real node last, ~40 s after `up` returned (pods placed then waited that
# long); at 200/400 every taint is gone by the time `up` returns (measured 2026-12-03). The namespace
# controller, which deletes each test's namespace, shares the setting.
CONTROLLER_MANAGER_QPS: Final = ("--kube-api-qps=200", "--kube-api-burst=400")


def _audit_policy(layout: Layout) -> Path:
    return write_if_changed(layout.state / "audit-policy.yaml", AUDIT_POLICY)


def start(layout: Layout, procs: Processes) -> None:
    pki, state = layout.pki, layout.state
    etcd_url = f"http://127.0.0.1:{ETCD_PORT}"
    procs.start(
        "etcd",
        [layout.binary("etcd"), "--name", "default", "--data-dir", state / "etcd",
         "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
         "--listen-peer-urls", f"http://127.0.0.1:{ETCD_PEER_PORT}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{ETCD_PEER_PORT}",
         "--initial-cluster", f"default=http://127.0.0.1:{ETCD_PEER_PORT}",
         "--unsafe-no-fsync", "--log-level", "warn"],  # test cluster: durability is not wanted
    )  # fmt: skip
    wait_ready(layout, procs, "etcd")

    procs.start(
        "kube-apiserver",
        [layout.binary("k8s", "kube-apiserver"), f"--etcd-servers={etcd_url}",
         f"--bind-address={NODE_IP}", f"--advertise-address={NODE_IP}", f"--secure-port={APISERVER_PORT}",
         f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
         f"--client-ca-file={pki}/ca.crt",
         f"--kubelet-client-certificate={pki}/apiserver-kubelet-client.crt",
         f"--kubelet-client-key={pki}/apiserver-kubelet-client.key",
         "--kubelet-preferred-address-types=InternalIP",
         "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
         f"--service-account-key-file={pki}/sa.pub", f"--service-account-signing-key-file={pki}/sa.key",
         f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=Node,RBAC",
         "--enable-admission-plugins=NodeRestriction", "--allow-privileged=true",
         "--endpoint-reconciler-type=lease", "--v=1",
         f"--audit-policy-file={_audit_policy(layout)}", f"--audit-log-path={layout.audit_log}",
         "--audit-log-format=json", "--audit-log-maxsize=100", "--audit-log-maxbackup=1"],
    )  # fmt: skip
    wait_ready(layout, procs, "kube-apiserver")

    kcm = layout.kubeconfig("controller-manager")
    procs.start(
        "kube-controller-manager",
        [layout.binary("k8s", "kube-controller-manager"), f"--kubeconfig={kcm}",
         f"--authentication-kubeconfig={kcm}", f"--authorization-kubeconfig={kcm}",
         "--bind-address=127.0.0.1", "--leader-elect=false", "--use-service-account-credentials=true",
         "--controllers=*", f"--service-account-private-key-file={pki}/sa.key", f"--root-ca-file={pki}/ca.crt",
         f"--cluster-signing-cert-file={pki}/ca.crt", f"--cluster-signing-key-file={pki}/ca.key",
         f"--service-cluster-ip-range={SERVICE_CIDR}", f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
         *CONTROLLER_MANAGER_QPS],
    )  # fmt: skip
    sched_conf = state / "scheduler.yaml"
    write_if_changed(
        sched_conf,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"clientConnection: {{kubeconfig: {layout.kubeconfig('scheduler')}}}\nleaderElection: {{leaderElect: false}}\n",
    )
    procs.start(
        "kube-scheduler",
        [layout.binary("k8s", "kube-scheduler"), f"--config={sched_conf}",
         f"--authentication-kubeconfig={layout.kubeconfig('scheduler')}",
         f"--authorization-kubeconfig={layout.kubeconfig('scheduler')}", "--bind-address=127.0.0.1"],
    )  # fmt: skip
    # Pods are rejected until the service-account controller has made the default ServiceAccount.
    procs.wait_until("kube-controller-manager", lambda: kubectl_ok(layout, "-n", "default", "get", "sa", "default"),
                     "the default ServiceAccount", timeout=60)  # fmt: skip
    procs.wait_until("kube-scheduler", lambda: urllib.request.urlopen(
        "https://127.0.0.1:10259/healthz", timeout=2, context=_insecure()).status == 200, "scheduler /healthz")  # fmt: skip


def wait_ready(layout: Layout, procs: Processes, name: str) -> None:
    """Until etcd answers /health, or the apiserver /readyz."""
    if name == "etcd":
        url = f"http://127.0.0.1:{ETCD_PORT}/health"
        procs.wait_until("etcd", lambda: urllib.request.urlopen(url, timeout=2).status == 200, "etcd /health")
    elif name == "kube-apiserver":
        procs.wait_until("kube-apiserver", lambda: kubectl_ok(layout, "get", "--raw", "/readyz"), "/readyz",
                         timeout=120)  # fmt: skip
    else:
        raise ValueError(f"no readiness check for {name}")


def _insecure():  # type: ignore[no-untyped-def]
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
