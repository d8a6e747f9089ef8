"""The operator's tunables, read once from its environment (the Helm chart sets them from its values)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from dtjob.api import NcclProfileName

# Env variables naming a GPUDirect daemon image, by the profile that runs it (the chart's nccl.daemonImages).
DAEMON_IMAGE_VARIABLES: Final = {
    NcclProfileName.GPUDIRECT_TCPX: "DTJOB_TCPX_DAEMON_IMAGE",
    NcclProfileName.GPUDIRECT_TCPXO: "DTJOB_TCPXO_DAEMON_IMAGE",
}

# Comma-separated; `dtjob run --namespace` sets it.
NAMESPACES_VARIABLE: Final = "DTJOB_NAMESPACES"
DEFAULT_MAX_CONCURRENT_PASSES: Final = 8
DEFAULT_API_QPS: Final = 100.0
DEFAULT_API_BURST: Final = 200
DEFAULT_PROGRESS_STATUS_SECONDS: Final = 30.0


@dataclass(frozen=True)
class OperatorSettings:
    max_concurrent_passes: int = DEFAULT_MAX_CONCURRENT_PASSES
    """Reconcile passes that may run at once; the others wait their turn (fairly, first come first served)."""
    api_qps: float = DEFAULT_API_QPS
    """Sustained API calls per second, over all passes (client-side token bucket)."""
    api_burst: int = DEFAULT_API_BURST
    """API calls that may go out at once before `api_qps` spaces them."""
    metrics_port: int | None = None
    daemon_images: Mapping[NcclProfileName, str] = field(default_factory=dict)
    """The GPUDirect daemons' images by profile, instead of the profiles' (a job's nccl.daemonImage wins)."""
    namespaces: tuple[str, ...] = ()
    """The namespaces whose jobs (and their pods) the operator reads; none: every namespace."""
    kueue: bool = True
    """Whether to look for Kueue's API at start-up and, if served, admit queued jobs through it."""
    manage_crd: bool = True
    """Whether to upgrade an older DistributedTrainingJob CRD at start-up (docs/operations.md)."""
    progress_port: int | None = None
    """The port of the progress intake the trainers POST their reports to (docs/progress.md); None: off."""
    progress_url: str | None = None
    """The intake's URL as the pods reach it (the chart's Service), rendered into DTJ_PROGRESS_URL."""
    progress_status_seconds: float = DEFAULT_PROGRESS_STATUS_SECONDS
    """A job's status.progress is written at most this often on reports alone (other changes write it too)."""


def from_env(env: dict[str, str] | None = None) -> OperatorSettings:
    """Settings from DTJOB_* variables; a malformed value is an error at start-up, not a silent default."""
    env = dict(os.environ) if env is None else env

    def number(name: str, default: float, minimum: float, kind: type[int] | type[float]) -> float:
        raw = env.get(name, "")
        if not raw:
            return default
        try:
            value = kind(raw)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not a {kind.__name__}") from None
        if value < minimum:
            raise ValueError(f"{name}={raw!r} must be at least {minimum}")
        return value

    port = env.get("DTJOB_METRICS_PORT")
    progress_port = int(number("DTJOB_PROGRESS_PORT", 0, 0, int)) or None
    progress_url = env.get("DTJOB_PROGRESS_URL") or None
    if progress_url is not None and progress_port is None:
        raise ValueError(
            "DTJOB_PROGRESS_URL is set but DTJOB_PROGRESS_PORT is not: no intake would take the reports"
        )
    return OperatorSettings(
        max_concurrent_passes=int(
            number("DTJOB_MAX_CONCURRENT_PASSES", DEFAULT_MAX_CONCURRENT_PASSES, 1, int)
        ),
        api_qps=number("DTJOB_API_QPS", DEFAULT_API_QPS, 0.001, float),
        api_burst=int(number("DTJOB_API_BURST", DEFAULT_API_BURST, 1, int)),
        metrics_port=int(port) if port else None,
        daemon_images={
            name: image for name, variable in DAEMON_IMAGE_VARIABLES.items() if (image := env.get(variable))
        },
        namespaces=tuple(ns for ns in env.get(NAMESPACES_VARIABLE, "").split(",") if ns),
        kueue=_switch(env, "DTJOB_KUEUE", default=True),
        manage_crd=_switch(env, "DTJOB_MANAGE_CRD", default=True),
        progress_port=progress_port,
        progress_url=progress_url,
        progress_status_seconds=number(
            "DTJOB_PROGRESS_STATUS_SECONDS", DEFAULT_PROGRESS_STATUS_SECONDS, 0.0, float
        ),
    )


def _switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in ("true", "false"):
        raise ValueError(f"{name}={env[name]!r} is not true or false")
    return raw == "true"


def kopf_run_namespaces(named: Sequence[str]) -> tuple[str, ...]:
    """The namespaces `kopf run --namespace` named, for the readers, which watch namespaces by name: Kopf's
    glob and exclusion patterns are refused, with the pattern named."""
    patterns = [name for name in named if any(sign in name for sign in "*?[!")]
    if patterns:
        raise ValueError(
            f"kopf run --namespace {' '.join(patterns)}: the operator watches namespaces by name, not by pattern"
        )
    return tuple(named)
