"""The DDP example that reports progress (examples/ddp-progress.yaml) on the real node (tier C), and the
job's status.progress."""

from __future__ import annotations

from typing import Any

import yaml

from hack.examples import fresh_checkpoint_dir
from tests.support.jobs import Jobs
from tests.support.paths import REPO

EXAMPLE = REPO / "examples" / "ddp-progress.yaml"
STEPS_PER_EPOCH = 23


def example(name: str, args: list[str], **run_policy: Any) -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    job["metadata"]["name"] = name
    job["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = f"/var/lib/dtjob-examples/{name}"
    trainer = job["spec"]["replicas"][0]["template"]["spec"]["containers"][0]
    trainer["args"] = args
    job["spec"]["runPolicy"].update(run_policy)
    fresh_checkpoint_dir(job)
    return job


def progress_of(jobs: Jobs, name: str) -> dict[str, Any] | None:
    progress: dict[str, Any] | None = (jobs.get(name).get("status") or {}).get("progress")
    return progress
