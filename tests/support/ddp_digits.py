"""The DDP example (examples/ddp-digits.yaml) on the real node (tier C): a run long enough to be
disrupted mid-way (`restart_job`), one that crashes at once (`crashing_job`), and the result line it
prints last."""

from __future__ import annotations

import json
from typing import Any

import yaml
from kubernetes import client

from tests.support.paths import REPO
from tests.support.reads import wait_log

EXAMPLE = REPO / "examples" / "ddp-digits.yaml"
# Long enough that the disruption lands mid-run whatever the machine's speed: 23 steps an epoch.
EPOCHS = 60
STEPS = EPOCHS * 23


def restart_job(name: str) -> dict[str, Any]:
    """The DDP example under another name, with its own checkpoint directory and a longer run."""
    job: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = f"/var/lib/dtjob-examples/{name}"
    trainer = job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    trainer["args"] = ["--epochs", str(EPOCHS), "--checkpoint-every", "20", "--async-checkpoints"]
    return job


# How the example's result line starts.
RESULT = '{"event": "result"'


def result_line(core: client.CoreV1Api, namespace: str, pod: str) -> dict[str, Any]:
    """The JSON result the example prints last, once its log has it (a rank may still be finishing when
    the job's status says it ended)."""
    return result_of(wait_log(core, namespace, pod, RESULT), pod)


def result_of(log: str, pod: str) -> dict[str, Any]:
    """The JSON result the example prints last, in `pod`'s `log`."""
    results = [json.loads(line) for line in log.splitlines() if line.startswith(RESULT)]
    assert results, f"no result line in the log of {pod}:\n{log[-3000:]}"
    return dict(results[-1])


# What the issue saw: a trainer that cannot write its model. The image runs as uid 1000. Everything on
# stderr, as a crash's log is: the kubelet interleaves stdout and stderr in no guaranteed order.
CRASH = "import sys; sys.stderr.write('epoch 1: loss 0.52\\n'); open('/etc/passwd', 'a')"


def crashing_job(name: str, image: str) -> dict[str, Any]:
    """The DDP example crashing at once, in `image` (the torch trainer's, where the cluster finds it)."""
    job: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = f"/var/lib/dtjob-examples/{name}"
    trainer = job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    trainer["image"], trainer["command"], trainer["args"] = image, ["python", "-c", CRASH], []
    job["spec"]["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 1}
    return job
