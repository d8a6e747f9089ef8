"""One CA and the leaf certificates and kubeconfigs of every component (openssl, as local-up-cluster)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from localcluster.layout import (
    APISERVER_PORT,
    KUBERNETES_SERVICE_IP,
    NODE_IP,
    REAL_NODE_NAME,
    REAL_NODES,
    Layout,
)

# name -> (subject, extended key usage); subjects are the bootstrap-RBAC identities.
CLIENTS = {
    "admin": "/O=system:masters/CN=kubernetes-admin",
    "apiserver-kubelet-client": "/O=system:masters/CN=kube-apiserver-kubelet-client",
    "controller-manager": "/CN=system:kube-controller-manager",
    "scheduler": "/CN=system:kube-scheduler",
    "kubelet": f"/O=system:nodes/CN=system:node:{REAL_NODE_NAME}",
    "kube-proxy": "/CN=system:kube-proxy",
    # The other real nodes' kubelets, each as its own node (the Node authorizer lets a kubelet write its
    # node's objects alone).
    **{f"kubelet-{node.name}": f"/O=system:nodes/CN=system:node:{node.name}" for node in REAL_NODES[1:]},
}
KUBECONFIG_USERS = (
    "admin",
    "controller-manager",
    "scheduler",
    "kube-proxy",
    *(u for u in CLIENTS if u.startswith("kubelet")),
)
APISERVER_SANS = ",".join(
    [
        "DNS:kubernetes",
        "DNS:kubernetes.default",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
        "DNS:localhost",
        "IP:127.0.0.1",
        f"IP:{NODE_IP}",
        f"IP:{KUBERNETES_SERVICE_IP}",
    ]
)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _leaf(pki: Path, name: str, subject: str, extensions: str) -> None:
    if (pki / f"{name}.crt").exists():
        return
    _openssl("req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{name}.key", "-subj", subject,
             "-out", f"{name}.csr", cwd=pki)  # fmt: skip
    ext = pki / f"{name}.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n" + extensions
    )
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "3650", "-sha256", "-extfile", ext.name, "-out", f"{name}.crt", cwd=pki)  # fmt: skip
    (pki / f"{name}.csr").unlink()
    ext.unlink()


def ensure_pki(layout: Layout) -> None:
    pki = layout.pki
    pki.mkdir(parents=True, exist_ok=True)
    if not (pki / "ca.crt").exists():
        _openssl("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-sha256", "-days", "3650",
                 "-subj", "/CN=dtjob-local-ca", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
                 "-keyout", "ca.key", "-out", "ca.crt", cwd=pki)  # fmt: skip
    _leaf(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        f"extendedKeyUsage=serverAuth\nsubjectAltName={APISERVER_SANS}\n",
    )
    for name, subject in CLIENTS.items():
        _leaf(pki, name, subject, "extendedKeyUsage=clientAuth\n")
    if not (pki / "sa.key").exists():
        _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
        _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for user in KUBECONFIG_USERS:
        layout.kubeconfig(user).write_text(
            f"""apiVersion: v1
kind: Config
clusters: [{{name: local, cluster: {{server: "https://{NODE_IP}:{APISERVER_PORT}", certificate-authority: {pki}/ca.crt}}}}]
users: [{{name: {user}, user: {{client-certificate: {pki}/{user}.crt, client-key: {pki}/{user}.key}}}}]
contexts: [{{name: local, context: {{cluster: local, user: {user}}}}}]
current-context: local
"""
        )


def server_certificate(layout: Layout, name: str, sans: str) -> tuple[Path, Path]:
    """A serving certificate from the cluster's CA (an addon's webhook server): its .crt and .key."""
    _leaf(layout.pki, name, f"/CN={name}", f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n")
    return layout.pki / f"{name}.crt", layout.pki / f"{name}.key"
