"""The Kopf hooks: start-up (settings, leader election, the intake, the CRD check, the readers), the health
probe, and shutdown (stop writing, let the passes end, then hand the Lease over)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

import click
import kopf

from dtjob import metrics
from dtjob.kube import leader, schema
from dtjob.kube.caches import Caches, JobKey
from dtjob.kube.intake import Intake
from dtjob.runtime.loop import job_seen
from dtjob.runtime.release import children_changed, release_finalizers
from dtjob.runtime.reports import reporter, take_report
from dtjob.runtime.state import Runtime, runtime_of, wake
from dtjob.settings import from_env, kopf_run_namespaces

log = logging.getLogger(__name__)

# On shutdown, how long the passes under way may take to end before the Lease is released anyway.
SHUTDOWN_GRACE_SECONDS: Final = 15.0

SCHEMA_RECHECK_SECONDS: Final = 15.0


def _kopf_run_namespaces() -> tuple[str, ...]:
    """What `kopf run --namespace` named (none under `dtjob run` or `kopf.run()`, which say DTJOB_NAMESPACES):
    Kopf keeps it to itself, but its command's click context holds it while the operator runs."""
    context = click.get_current_context(silent=True)
    try:
        return kopf_run_namespaces(context.params.get("namespaces") or () if context else ())
    except ValueError as refused:
        raise kopf.PermanentError(str(refused)) from None


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Each object's memo is a shallow copy of this operator-wide one: created here, the one runtime is
    # shared by the probe and the jobs' loops.
    config = from_env()
    if not config.namespaces:
        config = replace(config, namespaces=_kopf_run_namespaces())
    runtime = Runtime(config)
    memo["runtime"] = runtime
    metrics.TRAINING.follow(runtime.ledgers)
    # Kopf watches nothing here: no scanning of namespaces and CRDs for resources to serve, and our own
    # Events say what happened (Kopf's per-handler events would only be noise).
    settings.scanning.disabled = True
    settings.posting.enabled = False
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    runtime.leadership = leader.from_env()
    if runtime.leadership is None:
        runtime.acting.set()
    else:
        runtime.acting = runtime.leadership.acting
        runtime.kube.gate.fence = runtime.leadership.write_window
        runtime.election = asyncio.create_task(runtime.leadership.run(), name="leader election")

    def wake_jobs_on(node: str) -> None:
        """A node deleted or not Ready changes nothing on its pods for a while (the pod GC waits 40 s,
        the taint manager 300 s): wake the jobs on it, whose passes judge the node themselves."""
        assert runtime.caches is not None
        for key in runtime.caches.jobs_on(node):
            wake(runtime, key)

    def pod_seen(key: JobKey, uid: str) -> None:
        if job := runtime.jobs.get(key):
            job.created.pop(uid, None)  # the watch has it now

    if config.progress_port is not None:
        runtime.intake = Intake(
            functools.partial(reporter, runtime),
            functools.partial(take_report, runtime),
            runtime.acting.is_set,
            runtime.kube.read.review_token,
        )
        await runtime.intake.serve(config.progress_port)

    if not await _started_reading(runtime, wake_jobs_on, pod_seen):
        runtime.schema_watch = asyncio.create_task(
            _read_once_the_schema_is_current(runtime, wake_jobs_on, pod_seen), name="CRD schema"
        )


async def _read_once_the_schema_is_current(runtime: Runtime, *callbacks: Callable[..., None]) -> None:
    """Look again now and then: an admin who upgrades the CRD need not restart the operator, nor one whose
    API server was away when it started."""
    while True:
        await asyncio.sleep(SCHEMA_RECHECK_SECONDS)
        if await _started_reading(runtime, *callbacks):
            log.info("the CRD is current and the API server answers now: acting on jobs")
            return


async def _started_reading(runtime: Runtime, *callbacks: Callable[..., None]) -> bool:
    """Whether the readers started: the CRD is current and the API server answered. Never raises: the
    start-up hook that calls it first has bound the metrics and intake ports and started the election, and
    Kopf would run a hook that raised again (the ports taken by its first run, a second election beside
    the first: an operator that never acts). An API server away (a control-plane upgrade, a pod whose
    network is not up yet) is looked at again, as a CRD not current yet is."""
    try:
        refusal = await asyncio.to_thread(schema.refusal, runtime.kube, runtime.config.manage_crd)
        if refusal is None:
            runtime.refusal = None
            await _start_reading(runtime, *callbacks)
            return True
    except Exception as err:
        log.warning("could not check the CRD or start reading: %s; looking again in %.0fs", err,
                    SCHEMA_RECHECK_SECONDS)  # fmt: skip
        return False
    if refusal != runtime.refusal:
        log.error("not acting on any job: %s", refusal)
    runtime.refusal = refusal
    return False


async def _start_reading(
    runtime: Runtime, wake_jobs_on: Callable[[str], None], pod_seen: Callable[[JobKey, str], None]
) -> None:
    # Kueue is looked for once: installed later, it takes an operator restart (docs/kueue.md).
    config = runtime.config
    runtime.kueue_served = config.kueue and await asyncio.to_thread(runtime.kube.read.kueue_served)
    log.info(
        "Kueue's API is %s",
        "served: queued jobs are admitted through it" if runtime.kueue_served else "not served",
    )
    runtime.caches = Caches(
        config.namespaces,
        on_job=lambda key, body: job_seen(runtime, key, body),
        on_children=functools.partial(_children_changed, runtime),
        on_pod=pod_seen,
        on_node_trouble=wake_jobs_on,
        kueue_served=runtime.kueue_served,
    )
    runtime.caches.start()
    if runtime.kueue_served:
        runtime.release = asyncio.create_task(release_finalizers(runtime), name="Workload finalizers")


def _children_changed(runtime: Runtime, key: JobKey) -> None:
    wake(runtime, key)
    children_changed(runtime, key)


@kopf.on.probe(id="readers")
def readers_listing(memo: kopf.Memo, **_: Any) -> str:
    """The health endpoint fails while a reader cannot list (RBAC, the apiserver away for a while)."""
    runtime = runtime_of(memo)
    if runtime.refusal is not None:
        raise kopf.PermanentError(runtime.refusal)
    if runtime.caches is None:
        return "starting"
    if trouble := runtime.caches.trouble():
        raise kopf.PermanentError("; ".join(trouble))
    return "listed" if runtime.caches.synced.is_set() else "listing"


@kopf.on.cleanup()
async def shut_down(memo: kopf.Memo, **_: Any) -> None:
    """Stop writing, let the passes under way end, and only then hand the Lease over: a standby that
    takes over must not meet a write of ours still landing."""
    runtime = runtime_of(memo)
    runtime.kube.gate.fence = _closed
    loops = [memory.loop for memory in runtime.jobs.values() if memory.loop is not None]
    for loop in loops:
        loop.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    runtime.executor.shutdown(wait=False, cancel_futures=True)
    try:
        async with asyncio.timeout(SHUTDOWN_GRACE_SECONDS):
            await asyncio.to_thread(runtime.executor.shutdown, wait=True)
    except TimeoutError:  # a request stuck past its own deadline: its thread stays fenced off
        log.warning("passes still under way after %.0fs; stopping anyway", SHUTDOWN_GRACE_SECONDS)
    # The runtime's own pod creators: an operator run in-process (the tests) leaves no idle threads behind.
    runtime.kube.write.close()
    if runtime.election is not None:
        runtime.election.cancel()  # releases the Lease, so a standby takes over at once
        with contextlib.suppress(asyncio.CancelledError):
            await runtime.election
    for task in (runtime.schema_watch, runtime.release):
        if task is not None:
            task.cancel()
    if runtime.intake is not None:
        await runtime.intake.stop()
    if runtime.caches is not None:
        runtime.caches.stop()


def _closed() -> float:
    return 0.0
