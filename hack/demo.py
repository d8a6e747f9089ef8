"""`make demo`: the local cluster, the operator installed with Helm, one example trained to Succeeded.
`make demo CLUSTER=current`: the same on the kubeconfig's current context (hack/current.py).

Shows the job's progress while it runs as `dtjob watch` does without a terminal (a line a happening, and
the phase, attempt, ready pods, the trainers' last step, loss and time left whenever they change), prints
the stage table at its end (hack/stages.py: under `make demo`), and leaves the cluster up so you can
look around (`make cluster-down` when done).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from dtjob.console import views
from hack import images, stages
from hack.current import CurrentCluster, checkpoints_on, localize
from hack.examples import fresh_checkpoint_dir
from localcluster import Cluster, Tier
from localcluster.cluster import TIER_COMPONENTS

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "ddp-digits.yaml"
TIMEOUT_SECONDS = 900


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def install_operator(cluster: Cluster | CurrentCluster, namespace: str, *values: str) -> None:
    """The chart from this tree, with the operator image the cluster's nodes find."""
    repository, tag = images.deliver(cluster, images.OPERATOR).rsplit(":", 1)
    say(f"installing the operator with Helm into {namespace}")
    subprocess.run(
        [*cluster.helm_command(), "upgrade", "--install", "dtjob", str(REPO / "helm" / "dtjob-operator"),
         "-n", namespace, "--create-namespace", "--set", f"image.repository={repository}",
         "--set", f"image.tag={tag}", *values, "--wait", "--timeout", "5m"],
        check=True,
    )  # fmt: skip


def current_cluster_job(cluster: CurrentCluster, manifest: dict[str, Any], claim: str | None) -> None:
    """The example as a cluster whose nodes are not this machine runs it: the trainer image from where it
    was delivered, the checkpoints on `claim` or in each pod (a restart then starts over), and a GPU a pod
    where the nodes have GPUs (NCCL instead of gloo)."""
    trainer = images.deliver(cluster, images.TORCH_TRAINER)
    localize(manifest, {images.TORCH_TRAINER.ref: trainer})
    checkpoints_on(manifest, claim)
    if not claim:
        say("checkpoints in each pod's emptyDir: pass CHECKPOINT_CLAIM=<a ReadWriteMany PVC> to keep them")
    gpus = cluster.gpus()
    if gpus:
        gpus.wire(manifest)
        say(
            f"the nodes have GPUs ({gpus.model or 'model unlabelled'}, {gpus.per_node} a node): one a pod, NCCL"
        )


def local_cluster(manifest: dict[str, Any]) -> Cluster:
    """This machine's cluster, up with the real node alone (kwok's fake GPU nodes are for the tests), the
    trainer image in its containerd."""
    cluster = Cluster()
    with stages.stage("cluster") as this:
        this.cached = all(cluster.procs.running(c) for c in TIER_COMPONENTS["C"] if c != "kwok")
        cluster.up(Tier.C, fake_nodes=0)
        cluster.build(Tier.C, with_helm=True, fake_nodes=0)
    say("importing the trainer image (built once a content)")
    images.ensure(cluster, images.TORCH_TRAINER)
    fresh_checkpoint_dir(manifest)
    return cluster


def train(cluster: Cluster | CurrentCluster, manifest: dict[str, Any], namespace: str) -> str:
    """The example applied afresh and watched to its end, or TIMEOUT_SECONDS; returns its phase."""
    name = manifest["metadata"]["name"]
    cluster.kubectl("delete", "dtj", name, "-n", namespace, "--ignore-not-found", "--wait")
    say(f"applying {EXAMPLE.relative_to(REPO)}")
    print(cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest)), end="")
    deadline = time.monotonic() + TIMEOUT_SECONDS
    job: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        latest = json.loads(cluster.kubectl("get", "dtj", name, "-n", namespace, "-o", "json"))
        for line in views.log_lines(job, latest):
            say(line)
        job = latest
        if views.phase(job) in views.TERMINAL_PHASES:
            break
        time.sleep(2)
    print(cluster.kubectl("get", "dtj", "-n", namespace), end="")
    return views.phase(job) if job is not None else "Pending"


def main(argv: list[str] | None = None) -> int:
    try:
        return demo(argv)
    finally:
        stages.print_table()


def demo(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.demo", description=__doc__)
    parser.add_argument(
        "--cluster",
        choices=["local", "current"],
        default="local",
        help="local: bring up this machine's cluster; current: the kubeconfig's context",
    )
    parser.add_argument("--context", help="with --cluster current: a context other than the current one")
    parser.add_argument("--registry", help="with --cluster current: where the images go (host[:port][/path])")
    parser.add_argument(
        "--checkpoint-claim", help="with --cluster current: a ReadWriteMany PVC for checkpoints"
    )
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--operator-namespace", default="dtjob-system")
    args = parser.parse_args(argv)

    started = time.monotonic()
    manifest = yaml.safe_load(EXAMPLE.read_text())
    name = manifest["metadata"]["name"]
    cluster: Cluster | CurrentCluster
    if args.cluster == "local":
        cluster = local_cluster(manifest)
    else:
        cluster = CurrentCluster.from_kubeconfig(args.context, args.registry)
        say(f"context {cluster.context} of {cluster.kubeconfig}")
        current_cluster_job(cluster, manifest, args.checkpoint_claim)
    with stages.stage("install"):
        install_operator(cluster, args.operator_namespace)

    namespace = args.namespace
    with stages.stage("training") as this:
        phase = train(cluster, manifest, namespace)
        this.failed = phase != "Succeeded"
    say(f"{name}: {phase} in {time.monotonic() - started:.0f}s (this script; the stage table has the rest)")
    if isinstance(cluster, CurrentCluster):
        say(f"kubectl --context {cluster.context} get dtj,pods -n {namespace}; remove the operator with "
            f"`helm uninstall dtjob -n {args.operator_namespace} --kube-context {cluster.context}`")  # fmt: skip
    else:
        say(
            f"export KUBECONFIG={cluster.kubeconfig}   # then kubectl get dtj,pods; `make cluster-down` when done"
        )
    return 0 if phase == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
