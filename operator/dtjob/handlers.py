"""The only Kopf adapter: one long-lived loop per job, deciding on what the operator's reflectors saw.

Reads come from one kind of reader for every kind (`kube.caches`, `kube.reflector`): a list, then a watch,
each (re)listing replacing what was known, so an object deleted or changed while a watch was away is
seen as such. Passes start only once every reader has listed. Each job's loop keeps the job as its
reader last delivered it; a pass therefore makes no API read in the steady state and writes only what
changed (see `plan`). The loop is an asyncio task that the job's first sighting starts and its deletion
(seen by the watch, by a relisting, or as a 404 on a write) ends: no finalizer holds a job (or its
namespace) back when no operator runs. A loop that dies of an error outside its pass is started again,
with an Event. Kopf runs the process: start-up, shutdown, signals, and the health endpoint, which
reports a reader that cannot list (missing RBAC, an apiserver away) as not ready.

Where a cache can lag behind the operator's own writes, the write carries the guard and the adapter
remembers what it wrote until the watch catches up:
- the status patch carries the job's resourceVersion: a pass that decided on an outdated job is refused
  (409), reads the job once, and decides again; the job as written (or read) is used until the watch
  delivers that version or a newer one, so a restart is never recorded twice;
- the pods a pass created count as present until the pod watch delivers them, so the next pass neither
  creates them again nor takes them for lost members of the gang;
- a member the cache says is gone is confirmed gone by a fresh listing of the job's pods before it is
  charged (a new leader's cache may not have every pod the old one created yet).

Pod, node and job events only wake a job's loop; a pass runs when something changed or a timer is due,
under a bound on concurrent passes (a pass gives its slot up while its pods are created), and a failed
pass backs off exponentially (with jitter) for that job alone. A finished job sleeps until its TTL or an
event. With leader election on, only the replica that holds the Lease runs passes, and every write checks
that it still holds it (the fence of `Runtime.kube`'s gate); the other keeps its caches warm. All state that must survive a
restart (the attempt, restart counters) lives in the job's status, never in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import click
import kopf

from dtjob import metrics, progress
from dtjob.api import KIND
from dtjob.kube import leader, schema
from dtjob.kube.access import Kube
from dtjob.kube.caches import Caches, JobKey
from dtjob.kube.gate import Deposed
from dtjob.kube.intake import Intake, Reporter
from dtjob.kube.reads import PodIdentity
from dtjob.kube.refusals import Refused, link_failure, refusal
from dtjob.kube.writer import Executed
from dtjob.names import ATTEMPT_LABEL
from dtjob.observed import nodes_to_judge, owned_by, pod_essentials
from dtjob.plan import Event, Plan, reconcile, refused_pods
from dtjob.settings import OperatorSettings, from_env, kopf_run_namespaces

# A safety net only: every input reaches a pass through the watches, and every time-based check through
# the plan's requeue_after.
RESYNC_SECONDS: Final = 300.0
# Back-off after a failed pass: 0.5 s doubling up to 5 minutes, each wait drawn from [50%, 100%] of it.
BACKOFF_BASE_SECONDS: Final = 0.5
BACKOFF_MAX_SECONDS: Final = 300.0
# The pods a pass created that the pod watch has not delivered after this long are forgotten (its events
# came before the pass recorded them, or the pod went again): the pod watch is the truth then. Watch lag
# is milliseconds; a stale entry would hold a restarting gang back for this long.
CREATED_MEMORY: Final = timedelta(seconds=10)
FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})
# The finalizer that versions before the uninstall fix put on jobs (Kopf's, for its daemon): removed.
LEGACY_FINALIZER: Final = "training.dtjob.io/finalizer"
# Pass threads for each pass slot (maxConcurrentPasses): the passes whose pods are being created wait in
# threads of their own, so that a one-pod job's pass is not queued behind twenty 64-pod gangs' creates.
PASS_THREADS_A_SLOT: Final = 4
# A job's loop that died of an error outside its pass is started again after this long.
LOOP_RESTART_SECONDS: Final = 1.0
# On shutdown, how long the passes under way may take to end before the Lease is released anyway.
SHUTDOWN_GRACE_SECONDS: Final = 15.0
SCHEMA_RECHECK_SECONDS: Final = 15.0
# A job waiting for an earlier namesake's pods to go looks again this often (their watch events wake it too).
NAMESAKE_RECHECK_SECONDS: Final = 2.0

log = logging.getLogger(__name__)
Created = dict[str, tuple[datetime, dict[str, Any]]]
"""The pods a pass created that the pod watch had not delivered, by uid, with when they were created."""


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
    intake: Intake | None = None
    kube: Kube = field(init=False)
    """The way to the apiserver: its gate is fenced while this replica does not lead."""

    def __post_init__(self) -> None:
        self.kube = Kube.at(self.config.api_qps, self.config.api_burst)
        self.passes = threading.BoundedSemaphore(self.config.max_concurrent_passes)
        # More threads than slots: a pass whose pods are being created keeps its thread, not its slot.
        threads = self.config.max_concurrent_passes * PASS_THREADS_A_SLOT
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="pass")


def _runtime(memo: kopf.Memo) -> Runtime:
    runtime: Runtime = memo["runtime"]
    return runtime


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
        runtime.kube.gate.fence = runtime.leadership.holds
        runtime.election = asyncio.create_task(runtime.leadership.run(), name="leader election")

    def wake_jobs_on(node: str) -> None:
        """A node deleted or not Ready changes nothing on its pods for a while (the pod GC waits 40 s,
        the taint manager 300 s): wake the jobs on it, whose passes judge the node themselves."""
        assert runtime.caches is not None
        for key in runtime.caches.jobs_on(node):
            _wake(runtime, key)

    def pod_seen(key: JobKey, uid: str) -> None:
        if job := runtime.jobs.get(key):
            job.created.pop(uid, None)  # the watch has it now

    if config.progress_port is not None:
        runtime.intake = Intake(
            functools.partial(_reporter, runtime),
            functools.partial(_take_report, runtime),
            runtime.acting.is_set,
            runtime.kube.read.review_token,
        )
        await runtime.intake.serve(config.progress_port)

    if (refused := await asyncio.to_thread(schema.refusal, runtime.kube, config.manage_crd)) is None:
        await _start_reading(runtime, wake_jobs_on, pod_seen)
    else:
        runtime.refusal = refused
        log.error("not acting on any job: %s", refused)
        runtime.schema_watch = asyncio.create_task(
            _read_once_the_schema_is_current(runtime, wake_jobs_on, pod_seen), name="CRD schema"
        )


async def _read_once_the_schema_is_current(runtime: Runtime, *callbacks: Callable[..., None]) -> None:
    """Look again now and then: an admin who upgrades the CRD need not restart the operator."""
    while True:
        await asyncio.sleep(SCHEMA_RECHECK_SECONDS)
        try:
            runtime.refusal = await asyncio.to_thread(schema.refusal, runtime.kube, runtime.config.manage_crd)
            if runtime.refusal is None:
                log.info("the CRD is current now: acting on jobs")
                await _start_reading(runtime, *callbacks)
                return
        except Exception as err:  # an apiserver away: look again later, never give up
            log.warning("could not check the CRD or start reading: %s", err)


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
        on_job=lambda key, body: _job_seen(runtime, key, body),
        on_children=lambda key: _wake(runtime, key),
        on_pod=pod_seen,
        on_node_trouble=wake_jobs_on,
        kueue_served=runtime.kueue_served,
    )
    runtime.caches.start()


def _reporter(runtime: Runtime, identity: PodIdentity) -> Reporter | None:
    """The job pod a progress token was issued to, if the pod cache has that very pod (same uid)."""
    if runtime.caches is None:
        return None
    key = f"{identity.namespace}/{identity.pod}"
    job, essentials = runtime.caches.pods.group(key), runtime.caches.pods.get(key)
    if job is None or essentials is None or job not in runtime.jobs:
        return None
    meta = json.loads(essentials)["metadata"]
    attempt = (meta.get("labels") or {}).get(ATTEMPT_LABEL, "")
    if meta.get("uid") != identity.pod_uid or not attempt.isdigit():
        return None
    return Reporter(identity.namespace, job[1], identity.pod, int(attempt))


def _take_report(runtime: Runtime, reporter: Reporter, report: progress.Report) -> None:
    """Into the job's ledger; the job's loop is woken by the first report of an attempt or of a pod, by
    a change of phase, and otherwise at most every progress_status_seconds (each wake may write status)."""
    key = (reporter.namespace, reporter.job)
    before = runtime.ledgers.get(key)
    ledger = progress.received(before, reporter.attempt, reporter.pod, report, datetime.now(UTC))
    if ledger is None:
        return  # a pod of an attempt that is over, still running down
    runtime.ledgers[key] = ledger
    previous = (
        before.pods.get(reporter.pod) if before is not None and before.attempt == ledger.attempt else None
    )
    news = previous is None or previous.report.phase != report.phase
    woken = runtime.progress_woken.get(key)
    if news or woken is None or time.monotonic() - woken >= runtime.config.progress_status_seconds:
        runtime.progress_woken[key] = time.monotonic()
        _wake(runtime, key)


@kopf.on.probe(id="readers")
def readers_listing(memo: kopf.Memo, **_: Any) -> str:
    """The health endpoint fails while a reader cannot list (RBAC, the apiserver away for a while)."""
    runtime = _runtime(memo)
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
    runtime = _runtime(memo)
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
    if runtime.election is not None:
        runtime.election.cancel()  # releases the Lease, so a standby takes over at once
        with contextlib.suppress(asyncio.CancelledError):
            await runtime.election
    if runtime.schema_watch is not None:
        runtime.schema_watch.cancel()
    if runtime.intake is not None:
        await runtime.intake.stop()
    if runtime.caches is not None:
        runtime.caches.stop()


def _closed() -> bool:
    return False


def _wake(runtime: Runtime, key: JobKey) -> None:
    if job := runtime.jobs.get(key):
        job.wakeup.set()


def _job_seen(runtime: Runtime, key: JobKey, body: dict[str, Any] | None) -> None:
    """Each job's loop starts with the first sighting of it and ends when it is being deleted or gone.

    No finalizer: the job's pods and Service are its own by ownerReference, so the garbage collector
    removes them whether or not the operator runs, and a job deleted while it is down is simply gone when
    it comes back. (A Kopf daemon would add one, and a job could then not be deleted, nor its namespace,
    without a running operator.)"""
    memory = runtime.jobs.get(key)
    uid = body["metadata"].get("uid") if body is not None else None
    # A job being deleted that holds the legacy finalizer keeps its loop until a pass has removed it.
    going = body is None or bool(body["metadata"].get("deletionTimestamp") and not _legacy(body))
    if memory is not None and (going or memory.body["metadata"].get("uid") != uid):
        _end(runtime, key, memory)  # deleted (or deleted and created again under the name)
        memory = None
    if body is None or going:
        return
    if memory is None:
        memory = runtime.jobs[key] = JobMemory(body=body)
        _start_loop(runtime, key, memory)
        return
    memory.body = body
    memory.wakeup.set()
    memory.job_changed.set()


def _end(runtime: Runtime, key: JobKey, memory: JobMemory) -> None:
    log.info("job %s/%s is deleted (or being deleted): its loop ends", *key)
    memory.stopped.set()
    if runtime.jobs.get(key) is memory:
        del runtime.jobs[key]
        runtime.ledgers.pop(key, None)
        runtime.progress_woken.pop(key, None)


def _start_loop(runtime: Runtime, key: JobKey, memory: JobMemory) -> None:
    memory.loop = asyncio.create_task(run_job(runtime, key, memory), name=f"job {key[0]}/{key[1]}")
    memory.loop.add_done_callback(lambda task: _loop_ended(runtime, key, memory, task))


def _loop_ended(runtime: Runtime, key: JobKey, memory: JobMemory, task: asyncio.Task[None]) -> None:
    """A loop ends when its job goes; one that died of an error while its job lives is started again."""
    if task.cancelled() or (error := task.exception()) is None or memory.stopped.is_set():
        return
    where = traceback.extract_tb(error.__traceback__)[-1]
    at = f"{where.filename}:{where.lineno} in {where.name}"
    log.error("the loop of job %s/%s died (%r at %s); starting it again", *key, error, at)
    metrics.RECONCILE_ERRORS.inc()
    message = f"the operator's loop for this job stopped on an error and was started again: {error!r}"
    asyncio.get_running_loop().run_in_executor(
        runtime.executor,
        runtime.kube.write.post_event,
        memory.body,
        Event("Warning", "LoopRestarted", message[:1024]),
    )

    def again() -> None:
        if runtime.jobs.get(key) is memory and not memory.stopped.is_set():
            _start_loop(runtime, key, memory)

    asyncio.get_running_loop().call_later(LOOP_RESTART_SECONDS, again)


async def run_job(runtime: Runtime, key: JobKey, job: JobMemory) -> None:
    caches = runtime.caches
    assert caches is not None, "the readers start with the operator"
    try:
        # Until every reader has its first listing, an absent pod or node could be one not listed yet.
        await _sleep(caches.synced, job.stopped, None)
        while not job.stopped.is_set():
            await _sleep(runtime.acting, job.stopped, None)  # a standby replica waits for the Lease
            if job.stopped.is_set():
                break
            job.wakeup.clear()
            job.job_changed.clear()
            delay = await reconcile_once(runtime, key, job, job.body, caches)
            waker = job.job_changed if job.failures else job.wakeup  # a back-off ignores the pods' news
            await _sleep(waker, job.stopped, delay)
    finally:
        if job.stopped.is_set():
            metrics.JOB_PHASES.forget(*key)


async def reconcile_once(
    runtime: Runtime, key: JobKey, memory: JobMemory, body: dict[str, Any], caches: Caches
) -> float | None:
    """One pass; how long to wait before the next unless something wakes the loop earlier (None: until
    something does)."""
    start = time.monotonic()
    job = _freshest(dict(body), memory.written)
    if job is not memory.written:
        memory.written = None  # the watch caught up: keep one copy of the job, not two
    if job["metadata"].get("deletionTimestamp"):
        if _legacy(job):  # the job cannot go until the finalizer does
            await _write(runtime, key, runtime.kube.write.drop_finalizer, job, LEGACY_FINALIZER)
        return None
    now = datetime.now(UTC)
    pods = [json.loads(pod) for pod in caches.pods.of(key)]
    if held := _namesakes(pods, job["metadata"]["uid"]):
        # A job deleted and created again under its name: the earlier one's pods still hold the names
        # this gang's pods take. Created now, they would meet those (409) and be taken for made, then for
        # lost, and the new job would start with a restart. The pod watch wakes the loop as they go.
        log.info("job %s/%s waits for the pods of an earlier job of its name to go: %s", *key, held)
        return NAMESAKE_RECHECK_SECONDS
    others = [
        json.loads(obj) for index in (caches.services, caches.network_policies) for obj in index.of(key)
    ]
    children, overdue = _children(job["metadata"]["uid"], others, pods, memory.created, now)
    workloads = [
        w for w in (json.loads(w) for w in caches.workloads.of(key)) if owned_by(w, job["metadata"]["uid"])
    ]
    routes = dict(caches.routes.get(key[0], {}))
    queue = Queue(workloads[0] if workloads else None, dict(caches.flavors), runtime.kueue_served, routes)
    known = {name: caches.nodes.get(name) for name in nodes_to_judge(children)}
    cached = [node for node in known.values() if node is not None]
    unknown = [name for name, node in known.items() if node is None]
    try:
        plan, done, fresh, lagging = await asyncio.get_running_loop().run_in_executor(
            runtime.executor,
            _pass,
            runtime.passes,
            runtime.kube,
            job,
            children,
            overdue,
            cached,
            unknown,
            now,
            runtime.config,
            queue,
            runtime.ledgers.get(key),
        )
    except Deposed:  # the Lease was lost during the pass: the new leader decides from here
        log.info("pass of %s/%s stopped: this replica no longer leads", *key)
        return None
    except Exception as err:  # a failed pass must not kill the job's loop; it backs off and starts afresh
        memory.failures += 1
        metrics.RECONCILE_ERRORS.inc()
        delay = _backoff(memory.failures)
        what = "reconcile of %s/%s failed (%d in a row); retrying in %.1fs"
        # A refusal names the field, a failed link says it was cut: a traceback adds nothing to either.
        if (cause := refusal(err) or link_failure(err)) is not None:
            log.warning(what + ": %s", *key, memory.failures, delay, cause)
        else:
            log.exception(what, *key, memory.failures, delay)
        return delay
    finally:
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - start)
    memory.failures = 0
    if done.gone:  # deleted, though no watch said so yet (404 on its status): the loop ends
        _end(runtime, key, memory)
        return None
    for pod in lagging:  # still there, the pod watch behind: they count as present a while longer
        memory.created[pod["metadata"]["uid"]] = (now, pod)
    for deleted in plan.delete:  # a pod deleted must not live on here until its watch event comes
        memory.created.pop(deleted.uid or "", None)
    if done.created:  # the watch may have delivered some while the pass ran
        watched_now = [json.loads(pod) for pod in caches.pods.of(key)]
        _remember_created(memory.created, done.created, watched_now, now)
    if done.job is not None or fresh is not None:
        memory.written = done.job or fresh
    if done.conflict:
        return 0.0
    return _next_pass_in(plan, done.job or job, awaiting_watch=bool(memory.created))


def _legacy(job: Mapping[str, Any]) -> bool:
    return LEGACY_FINALIZER in (job["metadata"].get("finalizers") or [])


async def _write(runtime: Runtime, key: JobKey, write: Any, *args: Any) -> None:
    """One write outside a pass, in the pass pool; a failure is logged, and the next pass tries again."""
    try:
        await asyncio.get_running_loop().run_in_executor(runtime.executor, write, *args)
    except Exception as err:
        log.warning("%s of %s/%s failed: %s", write.__name__, *key, refusal(err) or repr(err))


@dataclass(frozen=True)
class Queue:
    """What a pass needs of Kueue: the job's Workload and the ResourceFlavors, as read."""

    workload: dict[str, Any] | None
    flavors: dict[str, dict[str, Any]]
    served: bool
    routes: dict[str, str]
    """The ClusterQueue of each LocalQueue in the job's namespace."""


PassOutcome = tuple[Plan, Executed, dict[str, Any] | None, list[dict[str, Any]]]


def _pass(slot: threading.BoundedSemaphore, *args: Any) -> PassOutcome:
    """`_pass_in_slot` once a pass slot is free (first come first served, as the threads wait)."""
    with slot:
        return _pass_in_slot(slot, *args)


def _pass_in_slot(
    slot: threading.BoundedSemaphore,
    kube: Kube,
    job: dict[str, Any],
    children: list[dict[str, Any]],
    overdue: list[dict[str, Any]],
    cached_nodes: list[dict[str, Any]],
    unknown_nodes: list[str],
    now: datetime,
    config: OperatorSettings,
    queue: Queue,
    ledger: progress.Ledger | None,
) -> PassOutcome:
    """The blocking part, in a worker thread: decide, write, and on a conflict read the job once. Also
    returns those of the `overdue` pods (created, never delivered by the pod watch) that still exist."""
    if _legacy(job):
        kube.write.drop_finalizer(job, LEGACY_FINALIZER)
    # A node the cache lacks may be new (its watch lags the pods'): ask before judging it deleted.
    nodes = cached_nodes + kube.read.read_nodes(unknown_nodes)
    # Likewise a pod this operator created that its watch never delivered: after an outage the pod watch
    # can reconnect seconds after the pass that created the gang. Ask before taking the pod for lost.
    lagging = [pod_essentials(pod) for pod in kube.read.read_pods(overdue)]
    if lagging:
        log.warning("the pod watch has not delivered %d pod(s) of %s/%s that exist; counting them",
                    len(lagging), job["metadata"]["namespace"], job["metadata"]["name"])  # fmt: skip
    children = children + lagging
    nodes += _unknown_nodes_of(kube, lagging, nodes)
    decide = functools.partial(
        reconcile, daemon_images=config.daemon_images, workload=queue.workload, flavors=queue.flavors,
        kueue_served=queue.served, routes=queue.routes if queue.served else None, ledger=ledger,
        progress_url=config.progress_url if config.progress_port is not None else None,
    )  # fmt: skip
    read: dict[str, Any] = {}  # what a plan asked the pass to read first, once each
    plan = decide(job, children, now, nodes)
    if plan.confirm_missing:  # the cache says members are gone: a listing of the job's pods says for sure
        listed = [pod_essentials(pod) for pod in kube.read.list_job_pods(job)]
        children = [child for child in children if child.get("kind") != "Pod"] + listed
        nodes += _unknown_nodes_of(kube, listed, nodes)
        plan = decide(job, children, now, nodes)
    while True:
        if plan.read_networks and "networks" not in read:  # once an attempt, for a profile needing them
            read["networks"] = kube.read.read_networks()
            read["installers"] = kube.read.read_gpudirect_daemonsets()
            read["device_classes"] = kube.read.read_device_classes()
        elif plan.read_priority is not None and "priority" not in read:  # once, for a queued job's Workload
            read["priority"] = kube.read.read_priority(plan.read_priority)
        else:
            break
        plan = decide(job, children, now, nodes, **read)
    try:
        done = kube.write.execute(job, plan, slot)
    except Refused as refused:  # the spec cannot work: say so on the job instead of retrying
        plan = refused_pods(job, str(refused), now)
        done = kube.write.execute(job, plan)
    if done.conflict:
        return plan, done, kube.read.read_job(job["metadata"]["namespace"], job["metadata"]["name"]), lagging
    metrics.record_pass(job, plan.status, now)
    return plan, done, None, lagging


def _unknown_nodes_of(
    kube: Kube, pods: list[dict[str, Any]], known: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    names = {node["metadata"]["name"] for node in known}
    return kube.read.read_nodes(name for name in nodes_to_judge(pods) if name not in names)


def _namesakes(pods: list[dict[str, Any]], uid: str) -> str:
    """The pods under the job's name that an earlier job of that name owns (deleted, its pods going)."""
    return ", ".join(
        sorted(
            pod["metadata"]["name"]
            for pod in pods
            if not owned_by(pod, uid)
            and any(ref.get("kind") == KIND for ref in pod["metadata"].get("ownerReferences") or [])
        )
    )


def _children(
    uid: str,
    others: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    created: Created,
    now: datetime,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job's Service, NetworkPolicy and pods as watched, and the pods it created that the watch lacks yet; forgets
    the created pods the watch has now and those it has not delivered after CREATED_MEMORY, which it
    returns apart (overdue: the pass asks the API server whether they exist)."""
    seen = {pod["metadata"]["uid"] for pod in pods}
    overdue = []
    for pod_uid, (created_at, pod) in list(created.items()):
        if pod_uid in seen or now - created_at > CREATED_MEMORY:
            del created[pod_uid]
            if pod_uid not in seen and owned_by(pod, uid):
                overdue.append(pod)
    pending = [pod for _, pod in created.values()]
    return [child for child in [*others, *pods, *pending] if owned_by(child, uid)], overdue


def _remember_created(
    created: Created, new: list[dict[str, Any]], watched: list[dict[str, Any]], now: datetime
) -> None:
    """Remember the pods a pass created, unless the watch has delivered them already."""
    seen = {pod["metadata"]["uid"] for pod in watched}
    for pod in new:
        if pod["metadata"]["uid"] not in seen:
            created[pod["metadata"]["uid"]] = (now, pod_essentials(pod))


async def _sleep(waker: asyncio.Event, stopped: asyncio.Event, delay: float | None) -> None:
    """Until woken, stopped (the job is being deleted) or `delay` is over."""
    waits = [asyncio.ensure_future(waker.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


def _freshest(watched: dict[str, Any], written: dict[str, Any] | None) -> dict[str, Any]:
    """The newer of the watch's copy of the job and the one this operator last wrote or read.

    resourceVersions are etcd revisions: integers that only grow. Kubernetes calls them opaque, so one
    that is not an integer makes the watch's copy win (the status patch's precondition still guards).
    """
    if written is None or written["metadata"].get("uid") != watched["metadata"].get("uid"):
        return watched
    try:
        newer = int(written["metadata"]["resourceVersion"]) > int(watched["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return watched
    return written if newer else watched


def _next_pass_in(plan: Plan, job: Mapping[str, Any], awaiting_watch: bool = False) -> float | None:
    """`awaiting_watch`: pods this operator created are not in the watch yet. One the watch never
    delivers (deleted again at once: its ADDED and DELETED events came before the POST returned) is
    forgotten after CREATED_MEMORY, and a pass then must see that it is gone."""
    soon = CREATED_MEMORY.total_seconds() + 1 if awaiting_watch else RESYNC_SECONDS
    if plan.requeue_after is not None:
        return max(0.0, min(plan.requeue_after, soon))
    if (job.get("status") or {}).get("phase") in FINISHED_PHASES and not awaiting_watch:
        return None  # a finished job costs nothing: only its TTL (a requeue_after) or an event wakes it
    return soon


def _backoff(failures: int) -> float:
    ceiling = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (failures - 1))
    return random.uniform(ceiling / 2, ceiling)
