"""Each job's long-lived loop: started by its first sighting, ended by its deletion; a pass when something
changed or a timer is due, a back-off after a failed one, a loop that died started again."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from dtjob import metrics
from dtjob.api import KIND
from dtjob.core.gke import autopilot_cluster
from dtjob.core.observed import nodes_to_judge, owned_by
from dtjob.core.plan import Event, Plan
from dtjob.core.workload_release import being_deleted
from dtjob.core.world import GkeFacts, KueueFacts, PassSettings, World
from dtjob.kube.caches import Caches, JobKey
from dtjob.kube.gate import Deposed
from dtjob.kube.refusals import link_failure, refusal
from dtjob.kube.writer import Executed, NameTaken
from dtjob.runtime.created import CREATED_MEMORY, children_seen, remember_created
from dtjob.runtime.legacy import LEGACY_FINALIZER, legacy
from dtjob.runtime.one_pass import run_pass
from dtjob.runtime.state import JobMemory, Runtime

log = logging.getLogger(__name__)

# A safety net only: every input reaches a pass through the watches, and every time-based check through
# the plan's requeue_after.
RESYNC_SECONDS: Final = 300.0

# Back-off after a failed pass: 0.5 s doubling up to 5 minutes, each wait drawn from [50%, 100%] of it.
BACKOFF_BASE_SECONDS: Final = 0.5

BACKOFF_MAX_SECONDS: Final = 300.0

FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})

# A job's loop that died of an error outside its pass is started again after this long.
LOOP_RESTART_SECONDS: Final = 1.0

# A job waiting for an earlier namesake's pods to go looks again this often (their watch events wake it too).
NAMESAKE_RECHECK_SECONDS: Final = 2.0


def job_seen(runtime: Runtime, key: JobKey, body: dict[str, Any] | None) -> None:
    """Each job's loop starts with the first sighting of it and ends when it is being deleted or gone.

    No finalizer: the job's pods and Service are its own by ownerReference, so the garbage collector
    removes them whether or not the operator runs, and a job deleted while it is down is simply gone when
    it comes back. (A Kopf daemon would add one, and a job could then not be deleted, nor its namespace,
    without a running operator.)"""
    memory = runtime.jobs.get(key)
    uid = body["metadata"].get("uid") if body is not None else None
    # A job being deleted that holds the legacy finalizer keeps its loop until a pass has removed it.
    going = body is None or bool(body["metadata"].get("deletionTimestamp") and not legacy(body))
    if memory is not None and (going or memory.body["metadata"].get("uid") != uid):
        end_job(runtime, key, memory)  # deleted (or deleted and created again under the name)
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


def end_job(runtime: Runtime, key: JobKey, memory: JobMemory) -> None:
    log.info("job %s/%s is deleted (or being deleted): its loop ends", *key)
    memory.stopped.set()
    if runtime.jobs.get(key) is memory:
        del runtime.jobs[key]
        runtime.ledgers.pop(key, None)
        runtime.progress_woken.pop(key, None)
        if (due := runtime.progress_due.pop(key, None)) is not None:
            due.cancel()


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
    job = freshest(dict(body), memory.written)
    if job is not memory.written:
        memory.written = None  # the watch caught up: keep one copy of the job, not two
    if job["metadata"].get("deletionTimestamp"):
        if legacy(job):  # the job cannot go until the finalizer does
            await _write(runtime, key, runtime.kube.write.drop_finalizer, job, LEGACY_FINALIZER)
        return None
    now = datetime.now(UTC)
    pods = [json.loads(pod) for pod in caches.pods.of(key)]
    if held := namesakes(pods, job["metadata"]["uid"]):
        # A job deleted and created again under its name: the earlier one's pods still hold the names
        # this gang's pods take. Created now, they would meet those (409) and be taken for made, then for
        # lost, and the new job would start with a restart. The pod watch wakes the loop as they go.
        log.info("job %s/%s waits for the pods of an earlier job of its name to go: %s", *key, held)
        return NAMESAKE_RECHECK_SECONDS
    world = _world(runtime, key, memory, job, pods, caches, now)
    try:
        plan, done, fresh, lagging = await asyncio.get_running_loop().run_in_executor(
            runtime.executor, run_pass, runtime.passes, runtime.kube, world
        )
    except Deposed:  # the Lease was lost during the pass: the new leader decides from here
        log.info("pass of %s/%s stopped: this replica no longer leads", *key)
        return None
    except Exception as err:  # a failed pass must not kill the job's loop; it backs off and starts afresh
        return _failed(key, memory, err)
    finally:
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - start)
    memory.failures = 0
    if done.gone:  # deleted, though no watch said so yet (404 on its status): the loop ends
        end_job(runtime, key, memory)
        return None
    _remember(key, memory, caches, plan, done, fresh, lagging, now)
    if done.conflict:
        return 0.0
    return next_pass_in(plan, done.job or job, awaiting_watch=bool(memory.created))


def _world(
    runtime: Runtime,
    key: JobKey,
    memory: JobMemory,
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    caches: Caches,
    now: datetime,
) -> World:
    """What the caches hold for the job, as one pass reads it: its children (with the pods created that the
    watch lacks yet, and apart those overdue), the nodes of its pods cached, its Workload and Kueue's
    objects around it, whether the cluster's nodes are Autopilot's, its ledger and the operator's settings.
    What the caches lack the core asks for (Needs)."""
    config, uid = runtime.config, job["metadata"]["uid"]
    others = [
        json.loads(obj) for index in (caches.services, caches.network_policies) for obj in index.of(key)
    ]
    children, overdue = children_seen(uid, others, pods, memory.created, now)
    # One being deleted is gone for the pass (runtime/release.py sees it out), as for Kueue's integrations.
    workloads = [
        w
        for w in (json.loads(w) for w in caches.workloads.of(key))
        if owned_by(w, uid) and not being_deleted(w)
    ]
    routes = dict(caches.routes.get(key[0], {}))
    served = runtime.kueue_served
    queue = KueueFacts(
        workloads[0] if workloads else None, dict(caches.flavors), served, routes if served else None
    )
    nodes = [node for name in nodes_to_judge(children) if (node := caches.nodes.get(name)) is not None]
    progress_url = config.progress_url if config.progress_port is not None else None
    return World(
        job,
        children,
        now,
        nodes,
        GkeFacts(autopilot=autopilot_cluster(caches.nodes.values())),
        queue,
        runtime.ledgers.get(key),
        PassSettings(config.daemon_images, progress_url),
        overdue=overdue,
        from_caches=True,
    )


def _failed(key: JobKey, memory: JobMemory, err: Exception) -> float:
    """The back-off after a failed pass, logged."""
    memory.failures += 1
    metrics.RECONCILE_ERRORS.inc()
    delay = backoff(memory.failures)
    what = "reconcile of %s/%s failed (%d in a row); retrying in %.1fs"
    # A refusal names the field, a failed link says it was cut: a traceback adds nothing to either.
    if (cause := refusal(err) or link_failure(err) or _name_taken(err)) is not None:
        log.warning(what + ": %s", *key, memory.failures, delay, cause)
    else:
        log.exception(what, *key, memory.failures, delay)
    return delay


def _name_taken(err: Exception) -> str | None:
    return str(err) if isinstance(err, NameTaken) else None


def _remember(
    key: JobKey,
    memory: JobMemory,
    caches: Caches,
    plan: Plan,
    done: Executed,
    fresh: dict[str, Any] | None,
    lagging: list[dict[str, Any]],
    now: datetime,
) -> None:
    """What the pass wrote or read that the watches have not delivered yet."""
    for pod in lagging:  # still there, the pod watch behind: they count as present a while longer
        memory.created[pod["metadata"]["uid"]] = (now, pod)
    for deleted in plan.delete:  # a pod deleted must not live on here until its watch event comes
        memory.created.pop(deleted.uid or "", None)
    if done.created:  # the watch may have delivered some while the pass ran
        watched_now = [json.loads(pod) for pod in caches.pods.of(key)]
        remember_created(memory.created, done.created, watched_now, now)
    if done.job is not None or fresh is not None:
        memory.written = done.job or fresh


async def _write(runtime: Runtime, key: JobKey, write: Any, *args: Any) -> None:
    """One write outside a pass, in the pass pool; a failure is logged, and the next pass tries again."""
    try:
        await asyncio.get_running_loop().run_in_executor(runtime.executor, write, *args)
    except Exception as err:
        log.warning("%s of %s/%s failed: %s", write.__name__, *key, refusal(err) or repr(err))


def namesakes(pods: list[dict[str, Any]], uid: str) -> str:
    """The pods under the job's name that an earlier job of that name owns (deleted, its pods going)."""
    return ", ".join(
        sorted(
            pod["metadata"]["name"]
            for pod in pods
            if not owned_by(pod, uid)
            and any(ref.get("kind") == KIND for ref in pod["metadata"].get("ownerReferences") or [])
        )
    )


async def _sleep(waker: asyncio.Event, stopped: asyncio.Event, delay: float | None) -> None:
    """Until woken, stopped (the job is being deleted) or `delay` is over."""
    waits = [asyncio.ensure_future(waker.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


def freshest(watched: dict[str, Any], written: dict[str, Any] | None) -> dict[str, Any]:
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


def next_pass_in(plan: Plan, job: Mapping[str, Any], awaiting_watch: bool = False) -> float | None:
    """`awaiting_watch`: pods this operator created are not in the watch yet. One the watch never
    delivers (deleted again at once: its ADDED and DELETED events came before the POST returned) is
    forgotten after CREATED_MEMORY, and a pass then must see that it is gone."""
    soon = CREATED_MEMORY.total_seconds() + 1 if awaiting_watch else RESYNC_SECONDS
    if plan.requeue_after is not None:
        return max(0.0, min(plan.requeue_after, soon))
    if (job.get("status") or {}).get("phase") in FINISHED_PHASES and not awaiting_watch:
        return None  # a finished job costs nothing: only its TTL (a requeue_after) or an event wakes it
    return soon


def backoff(failures: int) -> float:
    ceiling = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (failures - 1))
    return random.uniform(ceiling / 2, ceiling)
