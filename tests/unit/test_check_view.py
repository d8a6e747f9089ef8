"""`dtjob check`'s report: the cluster as read, the network and why, warnings, and each object's dry run."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from dtjob.console.check import check
from dtjob.console.check_view import DryRun, report
from dtjob.core.gke import Installer
from dtjob.core.plan import Event
from dtjob.core.world import GkeFacts
from tests.support.builders import manifest

# As an installer pinned by digest names it: the tag is read as the operator reads it (gke.name_and_tag).
PLUGIN = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.9@sha256:0123abcd"


def test_the_report_names_the_cluster_the_choice_the_warnings_and_each_refusal() -> None:
    job = manifest(("Worker", 2), accelerator={"type": "nvidia-h100-80gb", "count": 8})
    gke = GkeFacts(
        networks=frozenset({"vpc1", "vpc2"}),
        device_classes=frozenset(),
        installers={"nccl-tcpx-installer": Installer("kube-system", (PLUGIN, "pause"))},
        autopilot=True,
    )
    status = {"nccl": {"attempt": 1, "profile": "TCP", "reason": "TCP instead of GPUDirectTCPX: why"}}
    events = [
        Event("Warning", "NetworkChosen", "attempt 1: NCCL profile TCP: why"),
        Event("Normal", "X", "quiet"),
    ]
    sent = [
        DryRun("Service", "mnist", None, None),
        DryRun("Pod", "mnist-worker-0", "Worker", "exceeded quota"),
    ]
    assert report(job, gke, status, events, sent) == [
        "Job team-a/mnist: PyTorch, 2 Worker, 8 x nvidia-h100-80gb a pod",
        "Cluster: Autopilot (its nodes say so)",
        "  GPUDirect DaemonSets: nccl-tcpx-installer (kube-system, plugin v3.1.9)",
        "  Network objects: vpc1, vpc2",
        "  DRA DeviceClasses: none",
        "  nodes labelled as running GKE's DRANET driver, by accelerator: none",
        "Network: TCP: TCP instead of GPUDirectTCPX: why",
        "Warning NetworkChosen: attempt 1: NCCL profile TCP: why",
        "Server dry run (nothing is created):",
        "  Service mnist: accepted",
        "  Pod mnist-worker-0 (Worker): REFUSED: exceeded quota",
    ]


def test_an_invalid_job_says_why_and_that_nothing_was_sent() -> None:
    job = manifest(("Worker", 2))
    invalid = {"conditions": [{"type": "Invalid", "status": "True", "message": "spec.nccl.profile: no"}]}
    lines = report(job, GkeFacts(), invalid, [], [])
    assert "Invalid: spec.nccl.profile: no" in lines
    assert "Cluster: Standard (or not GKE)" in lines
    installers = {"nccl-tcpx-installer": Installer("gpudirect-system", ())}
    on_autopilot = report(job, GkeFacts(installers=installers), None, [], [])
    assert "Cluster: Autopilot (its GPUDirect installers run in Autopilot's namespaces)" in on_autopilot
    assert lines[-1] == "  nothing to send: the job would not start (see above)"


def test_a_manifest_that_is_not_a_valid_job_is_refused_before_the_cluster_is_read(tmp_path: Path) -> None:
    """Each error names its field, as `kubectl apply` would be refused; exit 1, before any kubeconfig is
    read (the one named does not exist)."""
    bad = manifest(("Worker", 2))
    bad["spec"]["replicas"][0]["count"] = -1
    cases = {"pod.yaml": ({"kind": "Pod"}, "pod.yaml: kind is 'Pod', not DistributedTrainingJob"),
             "bad.yaml": (bad, "spec.replicas.0.count: Input should be greater than or equal to 1")}  # fmt: skip
    for name, (content, said) in cases.items():
        (tmp_path / name).write_text(yaml.safe_dump(content))
        args = argparse.Namespace(filename=str(tmp_path / name), namespace=None, kubeconfig="/nonexistent",
                                  context=None)  # fmt: skip
        lines: list[str] = []
        assert check(args, lines.append) == 1
        assert [line.replace(str(tmp_path) + "/", "") for line in lines] == [said]
