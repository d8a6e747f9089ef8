"""Kueue, the real one (built from its Go module by build.sh), as an addon of tiers B and C.

It runs as a host process like the control plane. Its webhooks are served on 127.0.0.1 with a certificate
from the cluster's CA and registered by URL (the apiserver runs on this host too); only the webhooks of
Kueue's own kinds are registered, since no built-in job integration is enabled: DistributedTrainingJob is
an external framework whose Workloads dtjob creates itself.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import yaml

from localcluster.crds import wait_established
from localcluster.layout import Layout, write_if_changed
from localcluster.pki import server_certificate
from localcluster.procs import Processes

NAMESPACE = "kueue-system"
WEBHOOK_PORT = 19443
HEALTH_PORT = 18086
METRICS_PORT = 18087
GROUP = "kueue.x-k8s.io"
PROVISIONING_REQUESTS = "provisioningrequests.autoscaling.x-k8s.io"
# What Kueue calls the kind it leaves to an external controller: Kind.version.group.
EXTERNAL_FRAMEWORKS = ("DistributedTrainingJob.v1alpha1.training.dtjob.io",)
# The visibility API is an aggregated apiserver of its own; nothing here reads it.
FEATURE_GATES = "VisibilityOnDemand=false"
# Without its own certificate management Kueue reads its metrics server's certificate from this fixed
# path (cmd/kueue/main.go); `down` removes it.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# Kueue defaults an empty list to batch/job; named here so that it is said. Its webhook is not
# registered (see webhook_registrations), so Jobs are not touched; its controller acts only on Jobs
# that name a queue.
FRAMEWORKS = ("batch/job",)

# waitForPodsReady as platform teams run it (Kueue's "all-or-nothing with ready pods"): an admitted
# Workload whose pods are not all ready within the timeout is evicted and requeued with a backoff, then
# deactivated; until then it blocks every other admission. The timeout is Kueue's 5 min cut to 30 s, the
# time a gang's pods take to be ready on an idle machine with a margin; `make test`, which runs the Kueue
# tests beside the rest of the suite, stretches it by the run's pace (PODS_READY_TIMEOUT_ENV: a gang that
# ran was evicted at 30 s in a loaded run, 2026-12-07). The backoff's base is 1 s (Kueue's default is
# 60 s) so that a requeue shows within a test.
PODS_READY_TIMEOUT_ENV: Final = "DTJOB_KUEUE_PODS_READY_TIMEOUT_SECONDS"
PODS_READY_TIMEOUT_SECONDS: Final = 30


def wait_for_pods_ready() -> dict[str, Any]:
    """Kueue's waitForPodsReady for the local cluster, its timeout PODS_READY_TIMEOUT_ENV's if set."""
    timeout = int(os.environ.get(PODS_READY_TIMEOUT_ENV) or PODS_READY_TIMEOUT_SECONDS)
    return {
        "enable": True,
        "timeout": f"{timeout}s",
        "blockAdmission": True,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 1, "backoffBaseSeconds": 1},
    }


Kubectl = Callable[..., str]


def config_dir(layout: Layout) -> Path:
    """Kueue's CRDs and webhook registrations, copied from its module next to the binary by build.sh."""
    return layout.bin_dirs["kueue"] / "config"


def configuration(cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration for the local cluster: one replica, no certificate rotation of its own,
    waitForPodsReady on."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{HEALTH_PORT}"},
        "metrics": {"bindAddress": f"127.0.0.1:{METRICS_PORT}"},
        "webhook": {"host": "127.0.0.1", "port": WEBHOOK_PORT, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "waitForPodsReady": wait_for_pods_ready(),
        "integrations": {"frameworks": list(FRAMEWORKS), "externalFrameworks": list(EXTERNAL_FRAMEWORKS)},
    }


def webhook_registrations(manifests: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations with each webhook pointed at the host process by URL, keeping only
    the webhooks of Kueue's own kinds (one for a job integration that is not enabled would refuse every
    object of its kind: its path is not served)."""
    registrations = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        hooks = [hook for hook in doc.get("webhooks", []) if _kueue_kinds_only(hook)]
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{WEBHOOK_PORT}{path}", "caBundle": ca_bundle}
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        doc["webhooks"] = hooks
        registrations.append(doc)
    return registrations


def _kueue_kinds_only(hook: dict[str, Any]) -> bool:
    groups = {group for rule in hook.get("rules", []) for group in rule.get("apiGroups", [])}
    return groups == {GROUP}


def start(layout: Layout, procs: Processes, kubectl: Kubectl) -> None:
    config = config_dir(layout)
    # ProvisioningRequest (the Dynamic Workload Scheduler's API) first: Kueue sets its provisioning
    # admission check up only if the CRD is there when it starts.
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(config / "crd"),
            "-f", str(config / "provisioningrequests.yaml"))  # fmt: skip
    crds = [f"crd/{path.stem.split('_', 1)[1]}.{GROUP}" for path in sorted((config / "crd").glob("*.yaml"))]
    wait_established(kubectl, [*crds, f"crd/{PROVISIONING_REQUESTS}"])
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    state = layout.state / "kueue"
    cert_dir = state / "certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    crt, key = server_certificate(layout, "kueue-webhook", "IP:127.0.0.1")
    for directory in (cert_dir, METRICS_CERT_DIR):
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(crt, directory / "tls.crt")
        shutil.copyfile(key, directory / "tls.key")
    config_file = write_if_changed(state / "config.yaml", yaml.safe_dump(configuration(cert_dir)))
    procs.start(
        "kueue",
        [layout.binary("kueue"), f"--config={config_file}", f"--feature-gates={FEATURE_GATES}"],
        env={"KUBECONFIG": str(layout.kubeconfig())},
    )
    procs.wait_until("kueue", _ready, "kueue /readyz (its webhook server listening)", timeout=120)
    ca_bundle = base64.b64encode((layout.pki / "ca.crt").read_bytes()).decode()
    registrations = webhook_registrations((config / "webhooks.yaml").read_text(), ca_bundle)
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": registrations}))  # fmt: skip


def stop(procs: Processes, kubectl: Kubectl) -> None:
    """Stop Kueue and take its webhooks away (left registered, they would refuse Kueue's kinds)."""
    for kind in ("mutating", "validating"):
        kubectl("delete", f"{kind}webhookconfiguration", f"kueue-{kind}-webhook-configuration",
                "--ignore-not-found", check=False)  # fmt: skip
    procs.stop("kueue")
    remove_host_files()


def remove_host_files() -> None:
    shutil.rmtree(METRICS_CERT_DIR.parent.parent, ignore_errors=True)  # /etc/kueue


def _ready() -> bool:
    return urllib.request.urlopen(f"http://127.0.0.1:{HEALTH_PORT}/readyz", timeout=2).status == 200
