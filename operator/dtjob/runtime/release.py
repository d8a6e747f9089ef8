"""The Workloads being deleted whose finalizer can come off (core/workload_release.py): their job is often
gone by then, so this is no job's pass but a task of its own, woken by any change of a job's children (a
pod ending or gone, the Workload's deletion) and acting only while this replica leads."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Final

from dtjob.core.workload_release import being_deleted, finalizer_release
from dtjob.kube.caches import JobKey
from dtjob.runtime.state import Runtime

# After a write that failed (the apiserver away, the Lease lost): the next look, at most this soon.
RETRY_SECONDS: Final = 2.0

log = logging.getLogger(__name__)


def children_changed(runtime: Runtime, key: JobKey) -> None:
    """A job's pods or Workload changed: look at its Workloads if one of them is being deleted."""
    if runtime.caches is None:
        return
    # A cheap look first: this runs on every pod event, and almost no Workload is being deleted.
    if any('"deletionTimestamp"' in w for w in runtime.caches.workloads.of(key)):
        runtime.release_due.add(key)
        runtime.release_wake.set()


async def release_finalizers(runtime: Runtime) -> None:
    """Runs for the operator's life: each round takes the finalizer off every Workload due for it."""
    loop = asyncio.get_running_loop()
    while True:
        await runtime.release_wake.wait()
        await runtime.acting.wait()  # a standby releases nothing; what it saw meanwhile waits for it
        runtime.release_wake.clear()
        for key in sorted(runtime.release_due):
            caches = runtime.caches
            assert caches is not None
            workloads = [json.loads(w) for w in caches.workloads.of(key)]
            if not any(being_deleted(w) for w in workloads):
                runtime.release_due.discard(key)
                continue
            pods = [json.loads(p) for p in caches.pods.of(key)]
            for patch in filter(None, (finalizer_release(w, pods) for w in workloads)):
                try:
                    await loop.run_in_executor(
                        runtime.executor, runtime.kube.write.patch_workload, key[0], patch
                    )
                    log.info(
                        "Workload %s/%s: its job's pods hold nothing now: released",
                        key[0],
                        patch["metadata"]["name"],
                    )
                except Exception as err:  # looked at again on the next round
                    log.warning(
                        "could not release Workload %s/%s: %s", key[0], patch["metadata"]["name"], err
                    )
                    loop.call_later(RETRY_SECONDS, runtime.release_wake.set)
