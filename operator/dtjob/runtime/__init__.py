"""The controller runtime, hosted by Kopf (`kopf run -m dtjob.runtime`, or `dtjob run`): one long-lived loop per job, deciding on what the operator's reflectors saw.

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

from dtjob.runtime import hooks  # noqa: F401  (registers the Kopf hooks)
