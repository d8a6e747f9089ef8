"""Operator-wide state (Runtime) and what the runtime knows of each job beyond its watches (JobMemory)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

import kopf

from dtjob.core import progress
from dtjob.kube import leader
from dtjob.kube.access import Kube
from dtjob.kube.caches import Caches, JobKey
from dtjob.kube.fault import FaultHook
from dtjob.kube.intake import Intake
from dtjob.runtime.created import Created
from dtjob.settings import OperatorSettings

# Pass threads for each pass slot (maxConcurrentPasses): the passes whose pods are being created wait in
# threads of their own, so that a one-pod job's pass is not queued behind twenty 64-pod gangs' creates.
PASS_THREADS_A_SLOT: Final = 4


@dataclass
class JobMemory:
    """What the adapter knows of one job beyond its watches; lost on restart, and nothing depends on it."""

    body: dict[str, Any]
    """The job as its watch last delivered it."""
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    """The job is being deleted, or gone: its loop ends."""
    loop: asyncio.Task[None] | None = None
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    """Something about the job, its pods or their nodes changed."""
    job_changed: asyncio.Event = field(default_factory=asyncio.Event)
    """The job itself changed: this alone cuts a back-off short (the user may have fixed the spec)."""
    written: dict[str, Any] | None = None
    """The job as this operator last wrote or read it, newer than the watch's copy until that catches up."""
    created: Created = field(default_factory=dict)
    """Pods this operator created that the pod watch has not delivered yet."""
    failures: int = 0


@dataclass
class Runtime:
    """Operator-wide state, created at start-up and shared by every handler through the memo."""

    config: OperatorSettings
    jobs: dict[JobKey, JobMemory] = field(default_factory=dict)
    passes: threading.BoundedSemaphore = field(init=False)
    """A pass's slot: held while it decides and writes, given up while its pods are created."""
    executor: ThreadPoolExecutor = field(init=False)
    acting: asyncio.Event = field(default_factory=asyncio.Event)
    leadership: leader.Leadership | None = None
    election: asyncio.Task[None] | None = None
    caches: Caches | None = None
    kueue_served: bool = False
    refusal: str | None = None
    """Why the operator does not act on jobs yet (a CRD older than its own it may not upgrade)."""
    schema_watch: asyncio.Task[None] | None = None
    ledgers: dict[JobKey, progress.Ledger] = field(default_factory=dict)
    """The trainers' latest progress reports, by job (their current attempt's)."""
    progress_woken: dict[JobKey, float] = field(default_factory=dict)
    """When a report last woke the job's loop (monotonic): reports alone write its status only so often."""
    progress_due: dict[JobKey, asyncio.TimerHandle] = field(default_factory=dict)
    """The wake owed to reports that came before progress_status_seconds had passed."""
    intake: Intake | None = None
    release_due: set[JobKey] = field(default_factory=set)
    """Jobs with a Workload being deleted (runtime/release.py), looked at when `release_wake` is set."""
    release_wake: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Task[None] | None = None
    kube: Kube = field(init=False)
    """The way to the apiserver: its gate is fenced while this replica does not lead."""

    def __post_init__(self) -> None:
        self.kube = Kube.at(self.config.api_qps, self.config.api_burst, FaultHook.from_env())
        self.passes = threading.BoundedSemaphore(self.config.max_concurrent_passes)
        # More threads than slots: a pass whose pods are being created keeps its thread, not its slot.
        threads = self.config.max_concurrent_passes * PASS_THREADS_A_SLOT
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="pass")


def runtime_of(memo: kopf.Memo) -> Runtime:
    runtime: Runtime = memo["runtime"]
    return runtime


def wake(runtime: Runtime, key: JobKey) -> None:
    if job := runtime.jobs.get(key):
        job.wakeup.set()
