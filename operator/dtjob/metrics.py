"""Prometheus metrics: `dtjob_` prefix, `_total` counters, `_seconds` histograms, bounded labels.

Labels are namespace, framework, phase and reason, so cardinality stays bounded by what the cluster has,
not by how many jobs ever ran. The one exception, the training gauges (`dtjob_training_*`), name the job
and pod: they exist only while the job runs and its trainers report, one series a running pod, as
kube-state-metrics has for every pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from threading import Lock
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dtjob.core.progress import Ledger

PHASES = ("Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended", "Invalid")

STARTUP_SECONDS = Histogram(
    "dtjob_job_startup_seconds",
    "Time from a job's creation to all of its first attempt's pods running.",
    ["namespace", "framework"],
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
RESTARTS = Counter(
    "dtjob_job_restarts_total",
    "Gang restarts, by cause: failure (charged to backoffLimit), preemption (charged to maxPreemptions), "
    "hang (progressDeadlineSeconds; charged to maxHangRestarts), slow-rank (slowRankRestartSeconds) or "
    "requeue (evicted by Kueue for its own reasons: a PodsReady timeout, a drained queue, a deactivation).",
    ["namespace", "framework", "reason"],
)
REPLACEMENTS = Counter(
    "dtjob_member_replacements_total",
    "Members of elastic gangs (spec.torch.elastic) replaced while the rest trained on (no gang restart).",
    ["namespace", "framework"],
)
SLOW_RANKS = Counter(
    "dtjob_slow_ranks_total",
    "Times a job's SlowRank condition turned True: a rank's own work a step well above the rest of its gang's.",
    ["namespace", "framework"],
)
RESTART_COST_SECONDS = Histogram(
    "dtjob_restart_cost_seconds",
    "Wall time a gang restart cost, by phase (detection, teardown, start, restore, lost_work) and in total "
    "(status.goodput.lastRestart), observed once the new attempt reported its first step.",
    ["namespace", "framework", "phase"],
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
# The phase label -> its field in status.goodput.lastRestart.
RESTART_PHASES: Final = {
    "detection": "detectionSeconds",
    "teardown": "teardownSeconds",
    "start": "startSeconds",
    "restore": "restoreSeconds",
    "lost_work": "lostWorkSeconds",
    "total": "totalSeconds",
}
RECONCILE_SECONDS = Histogram(
    "dtjob_reconcile_duration_seconds",
    "Duration of one reconcile pass of one job (read, decide, apply, write status).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# status.preflight says GB/s (10^9 bytes/s, as nccl-tests prints it); Prometheus wants base units.
BYTES_PER_GB: Final = 1e9
PREFLIGHT_BUS_BANDWIDTH = Histogram(
    "dtjob_preflight_bus_bandwidth_bytes_per_second",
    "All-reduce busbw the NCCL preflight measured before an attempt trained, by transport and result.",
    ["namespace", "transport", "result"],
    buckets=tuple(gb * BYTES_PER_GB for gb in (0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 400)),
)
RECONCILE_ERRORS = Counter("dtjob_reconcile_errors_total", "Reconcile passes that raised an error.")


class JobPhases(Collector):
    """dtjob_jobs{namespace,framework,phase}: how many jobs this operator reconciles, by phase."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._jobs: dict[tuple[str, str], tuple[str, str]] = {}

    def set(self, namespace: str, name: str, framework: str, phase: str) -> None:
        with self._lock:
            self._jobs[(namespace, name)] = (framework, phase)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, name), None)

    def running(self, namespace: str, name: str) -> bool:
        with self._lock:
            return self._jobs.get((namespace, name), ("", ""))[1] == "Running"

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("dtjob_jobs", "Jobs by phase.", labels=["namespace", "framework", "phase"])
        counts: dict[tuple[str, str, str], int] = {}
        with self._lock:
            for (namespace, _), (framework, phase) in self._jobs.items():
                counts[(namespace, framework, phase)] = counts.get((namespace, framework, phase), 0) + 1
        for labels, count in sorted(counts.items()):
            family.add_metric(list(labels), count)
        yield family


JOB_PHASES = JobPhases()
REGISTRY.register(JOB_PHASES)

TRAINING_LABELS: Final = ["namespace", "job", "pod"]


def training_families(
    ledgers: Mapping[tuple[str, str], Ledger], running: Callable[[str, str], bool]
) -> list[GaugeMetricFamily]:
    """What the trainers of each running job last reported, a series per pod (a job that is not Running,
    restarting for example, has none: its figures would be an ended attempt's)."""
    step = GaugeMetricFamily("dtjob_training_step", "The pod's last reported step.", labels=TRAINING_LABELS)
    total = GaugeMetricFamily(
        "dtjob_training_total_steps",
        "The steps the pod's trainer will take, when it says.",
        labels=TRAINING_LABELS,
    )
    step_seconds = GaugeMetricFamily(
        "dtjob_training_step_seconds",
        "The pod's time a step over its last steps: in synchronous data parallelism the whole gang's.",
        labels=TRAINING_LABELS,
    )
    own_seconds = GaugeMetricFamily(
        "dtjob_training_own_step_seconds",
        "The pod's own work a step, without waiting for its peers in the all-reduce: what tells a slow rank.",
        labels=TRAINING_LABELS,
    )
    for (namespace, job), ledger in sorted(ledgers.items()):
        if not running(namespace, job):
            continue
        for pod, reported in sorted(ledger.pods.items()):
            labels, report = [namespace, job, pod], reported.report
            step.add_metric(labels, report.step)
            for family, value in (
                (total, report.total_steps),
                (step_seconds, report.step_seconds),
                (own_seconds, report.own_step_seconds),
            ):
                if value is not None:
                    family.add_metric(labels, value)
    return [step, total, step_seconds, own_seconds]


class TrainingProgress(Collector):
    """The training gauges, read from the operator's progress ledgers when Prometheus scrapes."""

    def __init__(self) -> None:
        self._ledgers: Mapping[tuple[str, str], Ledger] = {}

    def follow(self, ledgers: Mapping[tuple[str, str], Ledger]) -> None:
        """Read these ledgers (the operator's, filled by its intake) from now on."""
        self._ledgers = ledgers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # A copy made in one step under the GIL: the intake adds ledgers on the event loop's thread, and
        # each ledger is immutable once made.
        yield from training_families(dict(self._ledgers), JOB_PHASES.running)


TRAINING = TrainingProgress()
REGISTRY.register(TRAINING)


def record_pass(job: Mapping[str, Any], new_status: Mapping[str, Any] | None, now: datetime) -> None:
    """Update the job metrics from the status a pass is about to write (None: unchanged)."""
    meta, spec = job["metadata"], job.get("spec") or {}
    namespace, framework = meta["namespace"], str(spec.get("framework", "unknown"))
    old = job.get("status") or {}
    new = new_status if new_status is not None else old
    if phase := new.get("phase"):
        JOB_PHASES.set(namespace, meta["name"], framework, str(phase))
    if old.get("phase") != "Running" and new.get("phase") == "Running" and int(new.get("attempt", 1)) == 1:
        created = datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
        STARTUP_SECONDS.labels(namespace, framework).observe(max(0.0, (now - created).total_seconds()))
    if (preflight := new.get("preflight")) and preflight != old.get("preflight"):
        result = "passed" if preflight.get("passed") else "failed"
        transport = str(preflight.get("transport") or "unknown")
        PREFLIGHT_BUS_BANDWIDTH.labels(namespace, transport, result).observe(
            float(preflight.get("busBandwidthGbps") or 0.0) * BYTES_PER_GB
        )
    old_restarts, new_restarts = old.get("restarts") or {}, new.get("restarts") or {}
    counters = (
        ("failures", "failure"),
        ("preemptions", "preemption"),
        ("hangs", "hang"),
        ("slowRanks", "slow-rank"),
        ("requeues", "requeue"),
    )
    for key, reason in counters:
        if (delta := int(new_restarts.get(key, 0)) - int(old_restarts.get(key, 0))) > 0:
            RESTARTS.labels(namespace, framework, reason).inc(delta)
    if (delta := int(new_restarts.get("replacements", 0)) - int(old_restarts.get("replacements", 0))) > 0:
        REPLACEMENTS.labels(namespace, framework).inc(delta)
    if _is_true(new, "SlowRank") and not _is_true(old, "SlowRank"):
        SLOW_RANKS.labels(namespace, framework).inc()
    cost = (new.get("goodput") or {}).get("lastRestart") or {}
    before = (old.get("goodput") or {}).get("lastRestart") or {}
    if cost.get("totalSeconds") is not None and (before.get("totalSeconds") is None or before != cost):
        for phase, field in RESTART_PHASES.items():
            if (seconds := cost.get(field)) is not None:
                RESTART_COST_SECONDS.labels(namespace, framework, phase).observe(float(seconds))


def _is_true(status: Mapping[str, Any], condition: str) -> bool:
    return any(
        c.get("type") == condition and c.get("status") == "True" for c in status.get("conditions") or []
    )


def serve(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    start_http_server(port, registry=registry)
