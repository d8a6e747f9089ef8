"""The NCCL preflight as the operator renders and reads it. Pure.

With spec.nccl.preflight.enabled, every pod of the gang gets an init container `dtj-preflight`: the
trainer's image, env, resources and mounts, running `python -m dtjob_trainer.preflight` (see
trainer-images/runtime: an all-reduce sweep with the job's backend, judged by rank 0, every rank exiting
with the verdict). It comes after the network profile's sidecars, so the GPUDirect daemons run first.
Its termination message carries the figures as JSON, which `result_of` reads back for status.preflight.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from dtjob.api import DistributedTrainingJobSpec, NcclProfileName
from dtjob.core.gke import PROFILES

PREFLIGHT_CONTAINER: Final = "dtj-preflight"
COMMAND: Final = ("python", "-m", "dtjob_trainer.preflight")
PASSED: Final = "PreflightPassed"
FAILED: Final = "PreflightFailed"
# What a result says, as status.preflight keeps it (the trainer runtime writes these keys).
RESULT_FIELDS: Final = (
    "busBandwidthGbps", "algBandwidthGbps", "sizeBytes", "transport", "backend", "worldSize", "seconds",
)  # fmt: skip


def floor_gbps(spec: DistributedTrainingJobSpec, network: NcclProfileName) -> float | None:
    """The busbw floor: the spec's, else the network profile's (none without an accelerator: gloo)."""
    if spec.nccl.preflight.min_bus_bandwidth_gbps is not None:
        return spec.nccl.preflight.min_bus_bandwidth_gbps
    return PROFILES[network].preflight_floor_gbps if spec.accelerator is not None else None


def preflight_container(
    spec: DistributedTrainingJobSpec, network: NcclProfileName, trainer: Mapping[str, Any]
) -> dict[str, Any]:
    """The init container, from the trainer container as rendered (its env holds the rendezvous)."""
    settings = [("DTJ_PREFLIGHT_BUDGET_SECONDS", str(spec.nccl.preflight.budget_seconds))]
    if (floor := floor_gbps(spec, network)) is not None:
        settings.append(("DTJ_PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS", f"{floor:g}"))
    if spec.accelerator is not None and (transport := PROFILES[network].transport) is not None:
        settings.append(("DTJ_PREFLIGHT_EXPECTED_TRANSPORT", transport))
    container: dict[str, Any] = {
        "name": PREFLIGHT_CONTAINER,
        "image": trainer["image"],
        "command": list(COMMAND),
        "env": [*(trainer.get("env") or []), *({"name": n, "value": v} for n, v in settings)],
        # A crash (an image without the runtime, say) leaves its log's tail where the operator reads it.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    for key in ("imagePullPolicy", "envFrom", "resources", "volumeMounts", "securityContext", "workingDir"):
        if trainer.get(key) is not None:
            container[key] = trainer[key]
    return container


def result_of(message: str) -> dict[str, Any] | None:
    """The figures of a preflight's termination message, or None when it holds none (a crash's log)."""
    try:
        outcome = json.loads(message)
    except ValueError:
        return None
    if not isinstance(outcome, dict) or outcome.get("reason") not in (PASSED, FAILED):
        return None
    figures = {key: outcome[key] for key in RESULT_FIELDS if outcome.get(key) is not None}
    return {"passed": outcome["reason"] == PASSED, "message": str(outcome.get("message", "")), **figures}
