"""The only Kopf adapter: one long-lived loop per job, deciding on what the operator's watches saw.

Reads come from the watch streams: Kopf indexes keep the job's pods and its Service current (Kopf holds
every handler back until their first listing is in), a lighter watch of its own keeps every node's Ready
condition (`kube.nodes`; passes wait for its first listing), and each job's loop keeps the job as its
watch last delivered it. A pass therefore makes no API read in the steady state; it writes only what
changed (see `plan`). The loop is an asyncio task that the job's first event starts and its deletion
ends: no finalizer holds a job (or its namespace) back when no operator runs.

Where a cache can lag behind the operator's own writes, the write carries the guard and the adapter
remembers what it wrote until the watch catches up:
- the status patch carries the job's resourceVersion: a pass that decided on an outdated job is refused
  (409), reads the job once, and decides again; the job as written (or read) is used until the watch
  delivers that version or a newer one, so a restart is never recorded twice;
- the pods a pass created count as present until the pod watch delivers them, so the next pass neither
  creates them again nor takes them for lost members of the gang.

Pod, node and job events only wake a job's loop; a pass runs when something changed or a timer is due,
under a bound on concurrent passes, and a failed pass backs off exponentially (with jitter) for that job
alone. A finished job sleeps until its TTL or an event. With leader election on, only the replica that
holds the Lease runs passes; the other keeps its caches warm. All state that must survive a restart
(the attempt, restart counters) lives in the job's status, never in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import kopf

from dtjob import heap, metrics
from dtjob.api import GROUP, PLURAL, VERSION
from dtjob.kube import io, leader
from dtjob.kube.nodes import NodeWatch
from dtjob.names import JOB_NAME_LABEL
from dtjob.observed import nodes_to_judge, owned_by, pod_essentials
from dtjob.plan import Plan, reconcile, refused_pods
from dtjob.settings import OperatorSettings, from_env

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

log = logging.getLogger(__name__)
JobKey = tuple[str, str]
heap.limit_arenas()  # at import: before Kopf, the node watch and the pass pool start their threads
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
    passes: asyncio.Semaphore = field(init=False)
    executor: ThreadPoolExecutor = field(init=False)
    acting: asyncio.Event = field(default_factory=asyncio.Event)
    leadership: leader.Leadership | None = None
    election: asyncio.Task[None] | None = None
    heap_trimmer: asyncio.Task[None] | None = None
    nodes: NodeWatch | None = None
    nodes_synced: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.passes = asyncio.Semaphore(self.config.max_concurrent_passes)
        self.executor = ThreadPoolExecutor(self.config.max_concurrent_passes, thread_name_prefix="pass")


def _runtime(memo: kopf.Memo) -> Runtime:
    runtime: Runtime = memo["runtime"]
    return runtime


def _wake(memo: kopf.Memo, namespace: str | None, name: str | None, job_changed: bool = False) -> None:
    if namespace and name and (job := _runtime(memo).jobs.get((namespace, name))):
        job.wakeup.set()
        if job_changed:
            job.job_changed.set()


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    # Each object's memo is a shallow copy of this operator-wide one: created here, the one runtime is
    # shared by the pods' handlers and the jobs' loops.
    config = from_env()
    runtime = Runtime(config)
    memo["runtime"] = runtime
    io.limit_rate(config.api_qps, config.api_burst)
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    # Idle watches can silently stop delivering events (nolar/kopf#698): reconnect regularly.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    # Our own Events say what happened; Kopf's per-handler events would only be noise.
    settings.posting.enabled = False
    # Nor its per-handler log lines: a line for every pod and node event is most of an idle operator's
    # CPU. Warnings and errors still show, and --verbose (debug) shows everything.
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    runtime.nodes = _watch_nodes(runtime, kwargs["jobs_by_node"])  # Kopf passes indexes by name
    runtime.heap_trimmer = asyncio.create_task(_trim_heap(), name="heap trimmer")
    runtime.leadership = leader.from_env()
    if runtime.leadership is None:
        runtime.acting.set()
    else:
        runtime.acting = runtime.leadership.acting
        runtime.election = asyncio.create_task(runtime.leadership.run(), name="leader election")


@kopf.on.cleanup()
async def shut_down(memo: kopf.Memo, **_: Any) -> None:
    runtime = _runtime(memo)
    loops = [memory.loop for memory in runtime.jobs.values() if memory.loop is not None]
    for loop in loops:
        loop.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    if runtime.election is not None:
        runtime.election.cancel()  # releases the Lease, so a standby takes over at once
        with contextlib.suppress(asyncio.CancelledError):
            await runtime.election
    if runtime.heap_trimmer is not None:
        runtime.heap_trimmer.cancel()
    if runtime.nodes is not None:
        runtime.nodes.stop()
    runtime.executor.shutdown(wait=False, cancel_futures=True)


async def _trim_heap() -> None:
    while True:
        await asyncio.sleep(heap.TRIM_EVERY_SECONDS)
        heap.trim()


def _watch_nodes(runtime: Runtime, jobs_by_node: kopf.Index[str, JobKey]) -> NodeWatch:
    """A node deleted or not Ready changes nothing on its pods for a while (the pod GC waits 40 s, the
    taint manager 300 s): the watch wakes the jobs on it, whose passes judge the node themselves."""
    loop = asyncio.get_running_loop()

    def wake_jobs_on(node: str) -> None:
        for namespace, job in set(jobs_by_node.get(node, [])):
            if memory := runtime.jobs.get((namespace, job)):
                memory.wakeup.set()

    watch = NodeWatch(
        on_synced=lambda: loop.call_soon_threadsafe(runtime.nodes_synced.set),
        on_trouble=lambda node: loop.call_soon_threadsafe(wake_jobs_on, node),
    )
    watch.start()
    return watch


@dataclass(frozen=True)
class Watched:
    """The watch caches a pass reads a job's children from: Kopf's indexes, by job."""

    pods: kopf.Index[JobKey, str]
    services: kopf.Index[JobKey, str]
    network_policies: kopf.Index[JobKey, str]


def _compact(obj: Mapping[str, Any]) -> str:
    """The cached objects are kept as compact JSON: a fifth of the memory of the dicts at 8,000 pods,
    and a pass parses only its own job's few."""
    return json.dumps(obj, separators=(",", ":"))


@kopf.index("pods", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def pods_by_job(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[JobKey, str] | None:
    """Each job's pods, as much of them as a pass reads."""
    return {(namespace, labels[JOB_NAME_LABEL]): _compact(pod_essentials(body))} if namespace else None


@kopf.index("services", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def services_by_job(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[JobKey, str] | None:
    service = _without_managed_fields({k: v for k, v in body.items() if k != "status"})
    return {(namespace, labels[JOB_NAME_LABEL]): _compact(service)} if namespace else None


@kopf.index("networking.k8s.io", "v1", "networkpolicies", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def network_policies_by_job(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[JobKey, str] | None:
    """Each job's NetworkPolicy (spec.networkPolicy), as the Service is kept."""
    policy = _without_managed_fields(body)
    return {(namespace, labels[JOB_NAME_LABEL]): _compact(policy)} if namespace else None


@kopf.index("pods", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def jobs_by_node(
    namespace: str | None, spec: kopf.Spec, labels: kopf.Labels, **_: Any
) -> dict[str, JobKey] | None:
    """The job of every bound pod, by node: what a node's trouble must wake."""
    node = spec.get("nodeName")
    return {node: (namespace, labels[JOB_NAME_LABEL])} if node and namespace else None


@kopf.on.event("pods", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def pod_changed(
    namespace: str | None, uid: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any
) -> None:
    job = _runtime(memo).jobs.get((namespace or "", labels.get(JOB_NAME_LABEL, "")))
    if job is not None:
        job.created.pop(uid or "", None)  # the watch has it now (or saw it go)
    _wake(memo, namespace, labels.get(JOB_NAME_LABEL))


@kopf.on.event(GROUP, VERSION, PLURAL)
async def job_changed(
    type: str | None, body: kopf.Body, namespace: str | None, name: str | None, memo: kopf.Memo, **kwargs: Any
) -> None:
    """Each job's loop starts with the first event of it and ends when it is being deleted or gone.

    No finalizer: the job's pods and Service are its own by ownerReference, so the garbage collector
    removes them whether or not the operator runs, and a job deleted while it is down is simply gone when
    it comes back. (A Kopf daemon would add one, and a job could then not be deleted, nor its namespace,
    without a running operator; Kopf removes the finalizer older versions added.)"""
    assert namespace is not None and name is not None, "DistributedTrainingJob is namespaced"
    runtime, key = _runtime(memo), (namespace, name)
    memory = runtime.jobs.get(key)
    uid = body.get("metadata", {}).get("uid")
    if memory is not None and (memory.body["metadata"].get("uid") != uid or _going(type, body)):
        memory.stopped.set()  # deleted (or deleted and created again under the name): that loop ends
        runtime.jobs.pop(key, None)
        memory = None
    if _going(type, body):
        return
    if memory is None:
        memory = runtime.jobs[key] = JobMemory(body=_without_managed_fields(body))
        # Kopf passes indexes by name.
        watched = Watched(kwargs["pods_by_job"], kwargs["services_by_job"], kwargs["network_policies_by_job"])
        memory.loop = asyncio.create_task(
            run_job(runtime, key, memory, watched), name=f"job {namespace}/{name}"
        )
        return
    memory.body = _without_managed_fields(body)
    memory.wakeup.set()
    memory.job_changed.set()


def _without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy without metadata.managedFields, which no pass reads: most of a stored object's metadata."""
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}


def _going(event_type: str | None, body: kopf.Body) -> bool:
    return event_type == "DELETED" or bool(body.get("metadata", {}).get("deletionTimestamp"))


async def run_job(runtime: Runtime, key: JobKey, job: JobMemory, watched: Watched) -> None:
    try:
        # Until the node watch has its first listing, an absent node could be a deleted one.
        await _sleep(runtime.nodes_synced, job.stopped, None)
        while not job.stopped.is_set():
            await _sleep(runtime.acting, job.stopped, None)  # a standby replica waits for the Lease
            if job.stopped.is_set():
                break
            job.wakeup.clear()
            job.job_changed.clear()
            delay = await reconcile_once(runtime, key, job, job.body, watched)
            waker = job.job_changed if job.failures else job.wakeup  # a back-off ignores the pods' news
            await _sleep(waker, job.stopped, delay)
    finally:
        if runtime.jobs.get(key) is job:
            del runtime.jobs[key]
        metrics.JOB_PHASES.forget(*key)


async def reconcile_once(
    runtime: Runtime, key: JobKey, memory: JobMemory, body: Mapping[str, Any], watched: Watched
) -> float | None:
    """One pass; how long to wait before the next unless something wakes the loop earlier (None: until
    something does)."""
    start = time.monotonic()
    job = _freshest(dict(body), memory.written)
    if job is not memory.written:
        memory.written = None  # the watch caught up: keep one copy of the job, not two
    if job["metadata"].get("deletionTimestamp"):
        return None
    now = datetime.now(UTC)
    pods = [json.loads(pod) for pod in watched.pods.get(key, [])]
    others = [
        json.loads(obj)
        for index in (watched.services, watched.network_policies)
        for obj in index.get(key, [])
    ]
    children, overdue = _children(job["metadata"]["uid"], others, pods, memory.created, now)
    assert runtime.nodes is not None, "the node watch starts with the operator"
    known = {name: runtime.nodes.get(name) for name in nodes_to_judge(children)}
    cached = [node for node in known.values() if node is not None]
    unknown = [name for name, node in known.items() if node is None]
    try:
        async with runtime.passes:
            plan, done, fresh, lagging = await asyncio.get_running_loop().run_in_executor(
                runtime.executor, _pass, job, children, overdue, cached, unknown, now, runtime.config
            )
    except Exception as err:  # a failed pass must not kill the job's loop; it backs off and starts afresh
        memory.failures += 1
        metrics.RECONCILE_ERRORS.inc()
        delay = _backoff(memory.failures)
        what = "reconcile of %s/%s failed (%d in a row); retrying in %.1fs"
        if (refusal := io.refusal(err)) is not None:  # it names the field; a traceback adds nothing
            log.warning(what + ": %s", *key, memory.failures, delay, refusal)
        else:
            log.exception(what, *key, memory.failures, delay)
        return delay
    finally:
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - start)
    memory.failures = 0
    for pod in lagging:  # still there, the pod watch behind: they count as present a while longer
        memory.created[pod["metadata"]["uid"]] = (now, pod)
    for deleted in plan.delete:  # a pod deleted must not live on here until its watch event comes
        memory.created.pop(deleted.uid or "", None)
    if done.created:  # the watch may have delivered some while the pass ran
        watched_now = [json.loads(pod) for pod in watched.pods.get(key, [])]
        _remember_created(memory.created, done.created, watched_now, now)
    if done.job is not None or fresh is not None:
        memory.written = done.job or fresh
    if done.conflict:
        return 0.0
    return _next_pass_in(plan, done.job or job, awaiting_watch=bool(memory.created))


def _pass(
    job: dict[str, Any],
    children: list[dict[str, Any]],
    overdue: list[dict[str, Any]],
    cached_nodes: list[dict[str, Any]],
    unknown_nodes: list[str],
    now: datetime,
    config: OperatorSettings,
) -> tuple[Plan, io.Executed, dict[str, Any] | None, list[dict[str, Any]]]:
    """The blocking part, in a worker thread: decide, write, and on a conflict read the job once. Also
    returns those of the `overdue` pods (created, never delivered by the pod watch) that still exist."""
    # A node the cache lacks may be new (its watch lags the pods'): ask before judging it deleted.
    nodes = cached_nodes + io.read_nodes(unknown_nodes)
    # Likewise a pod this operator created that its watch never delivered: after an outage the pod watch
    # can reconnect seconds after the pass that created the gang. Ask before taking the pod for lost.
    lagging = [pod_essentials(pod) for pod in io.read_pods(overdue)]
    if lagging:
        log.warning("the pod watch has not delivered %d pod(s) of %s/%s that exist; counting them",
                    len(lagging), job["metadata"]["namespace"], job["metadata"]["name"])  # fmt: skip
    known = {node["metadata"]["name"] for node in nodes}
    nodes += io.read_nodes(name for name in nodes_to_judge(lagging) if name not in known)
    children = children + lagging
    images = config.daemon_images
    plan = reconcile(job, children, now, nodes, daemon_images=images)
    if plan.read_networks:  # once an attempt, for jobs whose GPUDirect profile needs GKE Network objects
        plan = reconcile(job, children, now, nodes, io.read_networks(), images)
    try:
        done = io.execute(job, plan)
    except io.Refused as refused:  # the spec cannot work: say so on the job instead of retrying
        plan = refused_pods(job, str(refused), now)
        done = io.execute(job, plan)
    if done.conflict:
        return plan, done, io.read_job(job["metadata"]["namespace"], job["metadata"]["name"]), lagging
    metrics.record_pass(job, plan.status, now)
    return plan, done, None, lagging


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
