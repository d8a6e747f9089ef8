"""`make demo`: the local cluster, the operator installed with Helm, one example trained to Succeeded.

Shows the job's progress (phase, ready pods, attempt, the trainer's last log line) while it runs, and
leaves the cluster up so you can look around (`make cluster-down` when done).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from hack import images
from hack.examples import fresh_checkpoint_dir
from localcluster import Cluster, Tier

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "ddp-digits.yaml"
NAMESPACE = "default"
OPERATOR_NAMESPACE = "dtjob-system"
TIMEOUT_SECONDS = 900


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def main() -> int:
    started = time.monotonic()
    cluster = Cluster()
    # The real node alone: the demo's pods run there, and kwok's fake GPU nodes are for the tests.
    cluster.up(Tier.C, fake_nodes=0)
    cluster.build(Tier.C, with_helm=True, fake_nodes=0)
    say("building the operator and trainer images (cached after the first run)")
    operator = images.ensure(cluster, images.OPERATOR)
    images.ensure(cluster, images.TORCH_TRAINER)

    repository, tag = operator.rsplit(":", 1)
    say(f"installing the operator with Helm into {OPERATOR_NAMESPACE}")
    subprocess.run(
        [str(cluster.layout.binary("helm")), "--kubeconfig", str(cluster.kubeconfig), "upgrade", "--install",
         "dtjob", str(REPO / "helm" / "dtjob-operator"), "-n", OPERATOR_NAMESPACE, "--create-namespace",
         "--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--wait", "--timeout", "5m"],
        check=True,
    )  # fmt: skip

    manifest = yaml.safe_load(EXAMPLE.read_text())
    name = manifest["metadata"]["name"]
    fresh_checkpoint_dir(manifest)
    cluster.kubectl("delete", "dtj", name, "-n", NAMESPACE, "--ignore-not-found", "--wait")
    say(f"applying {EXAMPLE.relative_to(REPO)}")
    print(cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE)), end="")

    deadline = time.monotonic() + TIMEOUT_SECONDS
    shown = ""
    phase = ""
    while time.monotonic() < deadline:
        job = json.loads(cluster.kubectl("get", "dtj", name, "-n", NAMESPACE, "-o", "json"))
        status = job.get("status", {})
        phase = status.get("phase", "Pending")
        log = cluster.kubectl("logs", "-n", NAMESPACE, f"{name}-worker-0", "--tail=1", check=False).strip()
        line = f"phase={phase} ready={status.get('replicasReady', '-')} attempt={status.get('attempt', 1)} | {log}"
        if line != shown:
            say(line)
            shown = line
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(2)
    print(cluster.kubectl("get", "dtj", "-n", NAMESPACE), end="")
    say(f"{name}: {phase} in {time.monotonic() - started:.0f}s (whole demo)")
    say(
        f"export KUBECONFIG={cluster.kubeconfig}   # then kubectl get dtj,pods; `make cluster-down` when done"
    )
    return 0 if phase == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
