"""The one pure entry point of the operator: a job and its children in, a Plan of what to do out.

The Kopf adapter hands in the job, the pods, Service and NetworkPolicy it owns and the nodes those pods are
bound to (all from its watch caches), calls `reconcile`, and executes the Plan: deletes first, then the
Service's and NetworkPolicy's apply, creates and label patches, then one status patch (only if it changed, guarded by the job's
resourceVersion), events, and the job's own deletion when its TTL expired.

Writes only on change: a pod is created once and its spec never written again (a live pod's spec is
immutable, and a newer operator's render must not touch running pods: the next attempt gets it); only the
labels and annotations the operator owns are patched back when they drifted; the Service and the
NetworkPolicy are applied only when missing or differing from the render. Both stay while the job lives
(through suspensions, restarts and after it finished) and go with it by ownerReference; the NetworkPolicy
is deleted when spec.networkPolicy.enabled is set back to false.

A gang restart is two passes: the first only records attempt N+1 (and the counters) in the status; the
next finds the pods of attempt N stale and deletes them, then creates attempt N+1 once they are gone. The
status write is the commit point, so an operator stopped anywhere in between neither loses nor repeats a
restart.

Nothing here raises on a bad spec: an invalid job gets an Invalid condition and a Warning event, and its
children are left alone. A spec whose pods the apiserver refuses (`refused_pods`) is Invalid too, until
the spec changes; the part of the gang created before the refusal goes, as it cannot form.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from dtjob.api import (
    CleanPodPolicy,
    ConditionType,
    DistributedTrainingJobSpec,
    JobStatus,
    NcclChoice,
    NcclProfileName,
    parse_job,
    timestamp,
)
from dtjob.api.errors import describe
from dtjob.api.semantics import semantic_problems
from dtjob.core import kueue, progress
from dtjob.core.decide import Action, Decision, Reason, decide, kept_in_place
from dtjob.core.frameworks import Gang, Member
from dtjob.core.gke import (
    NETWORK_GROUP,
    Installer,
    NetworkChoice,
    choose,
    daemon_mismatch,
    missing_device_class,
    missing_networks,
    needs_networks,
    on_autopilot,
)
from dtjob.core.names import ATTEMPT_LABEL, ATTEMPT_RESYNC_ANNOTATION, SPARE_LABEL, JobRef, spare_pod_name
from dtjob.core.observed import ACTIVE_STATES, ENDED_ABNORMALLY, Observed, PodView, observe
from dtjob.core.render import (
    render_gpu_nic_claims,
    render_network_policy,
    render_pod,
    render_service,
    render_spare,
)
from dtjob.core.status import (
    FINISHING,
    INVALID_SPEC,
    POD_REFUSED,
    Event,
    invalid_status,
    next_status,
    transition_events,
)
from dtjob.core.status.goodput import next_goodput

__all__ = [
    "Delete",
    "Event",
    "Plan",
    "Relabel",
    "dump_status",
    "read_status",
    "reconcile",
    "refused_pods",
    "status_patch",
]

# Actions whose pass keeps the gang alive: missing pods are created, and the Service and the labels of the
# current attempt's pods drift back when edited.
KEEPS_GANG: Final = frozenset({Action.CREATE_MISSING, Action.WAIT, Action.REPLACE_MEMBERS})
# Actions that create the current attempt's missing pods.
CREATES: Final = frozenset({Action.CREATE_MISSING, Action.REPLACE_MEMBERS})
# How soon a job Invalid for want of an object an admin may still create (its profile's Network objects,
# the priority class it names) looks for it again.
RECHECK_SECONDS: Final = 30.0
# Delete with no grace: the pod object goes at once, for one no kubelet will ever finish.
FORCE: Final = 0
# A status can hold only so many entries this version does not know; past that it is read as none.
MAX_STATUS_REPAIRS: Final = 20


@dataclass(frozen=True)
class Delete:
    kind: str
    name: str
    uid: str | None
    """A precondition: delete only the object we decided about, not a namesake created since."""
    grace_period_seconds: int | None = None
    """None: the pod's own grace period. 0: force, for a pod stuck terminating on a lost node."""


@dataclass(frozen=True)
class Relabel:
    """A merge patch of the labels and annotations the operator owns on a live pod that drifted."""

    name: str
    uid: str
    """A precondition: patch only the pod we looked at."""
    labels: dict[str, str | None]
    """None removes the label (a spare's, once it takes a rank)."""
    annotations: dict[str, str]


@dataclass(frozen=True)
class Plan:
    create: list[dict[str, Any]] = field(default_factory=list)
    """Pods to create (each once: one that exists already is fine)."""
    apply: list[dict[str, Any]] = field(default_factory=list)
    """The Service and the NetworkPolicy, server-side applied, when missing or differing from the render;
    the GPU NICs' ResourceClaimTemplate with the pods that claim from it."""
    relabel: list[Relabel] = field(default_factory=list)
    delete: list[Delete] = field(default_factory=list)
    status: dict[str, Any] | None = None
    """The whole new status, or None when it equals the job's current one. It is written as the merge
    patch from the stored status (`status_patch`), so that a field it lacks is gone from the server too."""
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    read_networks: bool = False
    """Nothing else is planned: decide again with the cluster's Network objects (nccl.choose needs them)."""
    confirm_missing: tuple[str, ...] = ()
    """Members the plan takes for lost because the children handed in lack them, or gives to a hot spare:
    decide again on a fresh listing of the job's pods before executing it (a cache that lags must not
    charge a failure, nor hand a rank to a second spare)."""
    workload: dict[str, Any] | None = None
    """The Kueue Workload to create, for a job in a Kueue queue that has none yet."""
    workload_active: bool | None = None
    """Set the Workload's spec.active to this: false while the job is suspended (Kueue then evicts it and
    its quota is handed back), true again on resume (Kueue queues it again)."""
    read_priority: kueue.Priority | None = None
    """Nothing else is planned: decide again with the value of this priority class (the Workload needs it)."""
    workload_status: dict[str, Any] | None = None
    """A merge patch of the Workload's status subresource (its resourceVersion a precondition): the quota
    handed back once an evicted gang is gone, or Finished once the job is."""
    requeue_after: float | None = None
    """Seconds until a time-based check is due (deadline, TTL, backoff, scheduling timeout, a grace on a
    pod running out); 0 when the next pass has work already (the teardown after a restart is recorded)."""


def reconcile(
    job: Mapping[str, Any],
    children: Sequence[Mapping[str, Any]],
    now: datetime,
    nodes: Sequence[Mapping[str, Any]] | None = None,
    networks: frozenset[str] | None = None,
    device_classes: frozenset[str] | None = None,
    installers: Mapping[str, Installer] | None = None,
    daemon_images: Mapping[NcclProfileName, str] | None = None,
    workload: Mapping[str, Any] | None = None,
    flavors: Mapping[str, Mapping[str, Any]] | None = None,
    kueue_served: bool = True,
    priority: kueue.Priority | None = None,
    routes: Mapping[str, str] | None = None,
    ledger: progress.Ledger | None = None,
    progress_url: str | None = None,
) -> Plan:
    """`nodes`: the Node objects the children are bound to, read after them (see `observe`); without
    them no node is judged lost and no pod stuck. `networks`: the names of the cluster's GKE Network
    objects, when a Plan asked for them (read_networks); `installers`: the GPUDirect prerequisite
    DaemonSets the cluster runs (where, their images), and `device_classes` the names of its DRA
    DeviceClasses, read with them (installers None: unknown, not judged). `daemon_images`: the operator's GPUDirect daemon
    images by profile (settings). `workload` and `flavors`: for a job in a Kueue queue, its Workload and
    Kueue's ResourceFlavors by name; `kueue_served`: whether the operator reads Kueue's API; `priority`:
    the priority class the job names, read when a Plan asked for it (read_priority); `routes`: the
    ClusterQueue of each LocalQueue in the job's namespace, as read (see kueue.read); `ledger`: the
    trainers' latest progress reports (see progress); `progress_url`: where the pods report them (the
    operator's intake, settings), None when it has none."""
    ref = JobRef.of(job)
    generation = job["metadata"].get("generation")
    old = read_status(job.get("status"))
    try:
        spec = parse_job(job).spec
    except ValidationError as error:
        return _invalid(old, describe(error), now, generation)
    if problems := semantic_problems(spec):
        return _invalid(old, "\n".join(problems), now, generation)

    recorded = old.nccl if old.nccl is not None and old.nccl.attempt == old.attempt else None
    chosen: NetworkChoice | None = None
    if _chooses_network(spec) and recorded is None:
        if networks is None and needs_networks(spec):
            return Plan(read_networks=True)
        classes = device_classes or frozenset()
        running = frozenset(installers) if installers is not None else None
        chosen = choose(spec, networks or frozenset(), running, classes, on_autopilot(installers))
        if (missing := _networks_missing(spec, chosen, networks or frozenset(), classes)) is not None:
            # Not the spec's fault alone: an admin may create the Networks. Look again before long.
            return replace(_invalid(old, missing, now, generation), requeue_after=RECHECK_SECONDS)
    network = chosen.profile if chosen else recorded.profile if recorded and _chooses_network(spec) else None
    autopilot = chosen.autopilot if chosen else bool(recorded and recorded.autopilot)
    gang = Gang.of(
        ref, spec, old.attempt, network, daemon_images, progress_url, tuple(old.avoided_nodes), autopilot
    )
    if chosen is not None and (
        mismatch := daemon_mismatch(chosen.profile, gang.daemon_image, installers or {})
    ):
        chosen = replace(chosen, reason=f"{chosen.reason}; but {mismatch}", degraded=True)
    observed = observe(children, now, nodes)
    queue = kueue.queue_of(job)
    queueing = kueue.read(queue, workload, flavors or {}, kueue_served, routes) if queue else None
    if _pods_refused(old, generation):
        live = [pod for pod in observed.of_attempt(gang.attempt) if not pod.terminating]
        return Plan(delete=[Delete("Pod", pod.name, pod.uid or None) for pod in live])
    if queueing is not None and queueing.state == kueue.State.MISSING and not old.finished:
        wanted = kueue.priority_class_of(job, [render_pod(gang, m) for m in gang.members])
        if wanted is not None and (priority is None or priority.class_name != wanted.class_name):
            return Plan(read_priority=wanted)
        if priority is not None and priority.value is None:
            missing = f"the job names priority class {priority.class_name} ({priority.source}), which does not exist"
            return replace(_invalid(old, missing, now, generation), requeue_after=RECHECK_SECONDS)
    slow = progress.slow_ranks(ledger, gang.attempt)
    decision = decide(spec, old, gang, observed, now, queueing, ledger, slow)
    admitted = queueing if queueing is not None and queueing.state == kueue.State.ADMITTED else None
    admission = admitted.message if admitted else None
    # Rank 0's reports lead the progress shown; a spare that took rank 0 reports under its own name.
    rank_zero = gang.rank_zero.pod
    if ledger is not None:
        rank_zero = next(
            (p.name for p in observed.pods if p.member == rank_zero and p.attempt == gang.attempt), rank_zero
        )
    shown = progress.carried(old.progress, ledger, rank_zero, gang.attempt)
    new = next_status(
        old, gang, observed, decision, now, generation, queueing is not None, admission, shown, slow
    )
    new = new.model_copy(update={"goodput": next_goodput(old, new, observed, now)})
    events = transition_events(old, new)
    if chosen is not None:
        record = NcclChoice(
            attempt=old.attempt,
            profile=chosen.profile,
            reason=chosen.reason,
            autopilot=chosen.autopilot or None,
        )
        new = new.model_copy(update={"nccl": record})
        events.append(_network_event(old.attempt, chosen))
    keeps_gang = decision.action in KEEPS_GANG and decision.reason != Reason.FINISHED
    kept = kept_in_place(old, observed) if keeps_gang else ()
    deletes = _deletes(decision, gang.attempt, observed, old, spec, kept)
    service, pods, relabel = _writes(decision, gang, observed, admitted, kept)
    return Plan(
        create=pods,
        apply=service,
        workload=_workload_to_create(job, gang, queueing, new, priority),
        workload_status=_workload_status(queueing, observed, new, now),
        workload_active=_workload_active(queueing, spec, old),
        relabel=relabel,
        delete=[delete for delete, _ in deletes] + _policy_unwanted(spec, observed),
        status=_changed(old, new),
        events=events + [event for _, event in deletes if event is not None],
        delete_job=decision.action == Action.TTL_EXPIRED,
        requeue_after=_requeue_after(decision, spec, observed, now),
        confirm_missing=decision.vanished + tuple(member for _, member in decision.takeovers),
    )


def _chooses_network(spec: DistributedTrainingJobSpec) -> bool:
    """Whether the job's GPU pods get a network chosen for each attempt (kept in status.nccl): Auto, or
    an explicit profile whose Network objects must exist. Not for CPU jobs or an explicit TCP."""
    return spec.accelerator is not None and (
        spec.nccl.profile == NcclProfileName.AUTO or needs_networks(spec)
    )


def _networks_missing(
    spec: DistributedTrainingJobSpec,
    chosen: NetworkChoice,
    networks: frozenset[str],
    device_classes: frozenset[str],
) -> str | None:
    """Why an explicit profile cannot start here: the cluster lacks its Network objects, or the DeviceClass
    it claims NICs from (Auto falls back)."""
    if spec.nccl.profile == NcclProfileName.AUTO:
        return None
    if (device_class := missing_device_class(chosen.profile, device_classes)) is not None:
        return (
            f"spec.nccl.profile: {chosen.profile} claims each pod's GPU NICs from the DRA DeviceClass "
            f"{device_class}, which this cluster lacks: GKE installs it on clusters with managed DRANET "
            f"(docs/gke.md; this job looks again every {RECHECK_SECONDS:.0f}s). Use profile RDMA with "
            "the rdma-N Network objects, or Auto"
        )
    missing = missing_networks(spec, chosen.profile, networks, chosen.autopilot)
    if not missing:
        return None
    return (
        f"spec.nccl.profile: {chosen.profile} attaches each pod to the GKE Network objects "
        f"({NETWORK_GROUP}/v1) {', '.join(missing)}, which this cluster lacks. An admin creates them "
        f"(docs/gke.md; this job looks again every {RECHECK_SECONDS:.0f}s); or use profile Auto, "
        "which falls back to TCP without them"
    )


def _network_event(attempt: int, chosen: NetworkChoice) -> Event:
    message = f"attempt {attempt}: NCCL profile {chosen.profile}: {chosen.reason}"
    return Event("Warning" if chosen.degraded else "Normal", "NetworkChosen", message)


def read_status(raw: Mapping[str, Any] | None) -> JobStatus:
    """The stored status, read as far as this operator understands it.

    A status written by another version (a rollback) may hold what this one cannot parse: a condition
    type, a phase or a role it does not know. Only those entries are dropped (the smallest part that
    holds the error: a list item, else the field); the attempt, the counters and everything else are
    kept, so that a rollback never restarts a gang or deletes a pod for it.
    """
    remaining = copy.deepcopy(dict(raw or {}))
    for _ in range(MAX_STATUS_REPAIRS):
        try:
            return JobStatus.model_validate(remaining)
        except ValidationError as error:
            for problem in sorted(error.errors(), key=_deepest_first):
                _drop(remaining, problem)
    return JobStatus(attempt=_int_or(remaining.get("attempt"), 1))


def _deepest_first(problem: ErrorDetails) -> tuple[int, ...]:
    # Drop list items from the highest index down, so earlier indexes stay valid.
    return tuple(-x if isinstance(x, int) else 0 for x in problem["loc"])


def _drop(status: dict[str, Any], problem: ErrorDetails) -> None:
    """Remove the innermost list item on the error's path, else the field it names."""
    loc = list(problem["loc"])
    cut = max((i for i, part in enumerate(loc) if isinstance(part, int)), default=len(loc) - 1)
    parent: Any = status
    for part in loc[:cut]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return
    with contextlib.suppress(KeyError, IndexError, TypeError):
        del parent[loc[cut]]


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and value >= 1 else default


def dump_status(status: JobStatus) -> dict[str, Any]:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def status_patch(stored: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns the stored status into `new`, the whole status a pass
    decided: a field `new` leaves out is written as null, which deletes it. A patch of `new` alone would
    keep every field the pass cleared (brokenSince after a settle window, say): a merge patch keeps what
    it omits. Lists are replaced whole, as a merge patch does anyway."""
    patch: dict[str, Any] = {key: None for key in (stored or {}) if key not in new}
    for key, value in new.items():
        old = (stored or {}).get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            if nested := status_patch(old, value):
                patch[key] = nested
        elif value != old:
            patch[key] = value
    return patch


def refused_pods(job: Mapping[str, Any], refusal: str, now: datetime) -> Plan:
    """The plan after the apiserver refused a pod rendered from the job's spec: the job is Invalid, with
    the apiserver's words (they name the field), until its spec changes."""
    message = (
        f"the apiserver refused a pod rendered from this spec: {refusal}. Fix the pod template together "
        "with spec.runPolicy.suspend: true (the fields that shape pods change only while suspended), then "
        "resume; or delete the job and create it again"
    )
    generation = job["metadata"].get("generation")
    return _invalid(read_status(job.get("status")), message, now, generation, POD_REFUSED)


def _pods_refused(old: JobStatus, generation: int | None) -> bool:
    """Whether the apiserver refused the pods of this very generation of the spec."""
    invalid = old.condition(ConditionType.INVALID)
    return (
        invalid is not None
        and invalid.status == "True"
        and invalid.reason == POD_REFUSED
        and invalid.observed_generation == generation
    )


def _invalid(
    old: JobStatus, message: str, now: datetime, generation: int | None, reason: str = INVALID_SPEC
) -> Plan:
    new = invalid_status(old, message, now, generation, reason)
    return Plan(status=_changed(old, new), events=transition_events(old, new))


def _changed(old: JobStatus, new: JobStatus) -> dict[str, Any] | None:
    new_dump = dump_status(new)
    return None if new_dump == dump_status(old) else new_dump


def _workload_to_create(
    job: Mapping[str, Any],
    gang: Gang,
    queueing: kueue.Queueing | None,
    new: JobStatus,
    priority: kueue.Priority | None,
) -> dict[str, Any] | None:
    if queueing is None or queueing.state != kueue.State.MISSING or new.finished:
        return None
    pods = [render_pod(gang, member) for member in gang.members]
    # Spares hold the same resources as members: the quota counts them.
    pods += [
        render_spare(gang, role, number)
        for role in gang.spec.roles()
        for number in range(gang.spec.replica(role).spares)
    ]
    return kueue.render_workload(job, gang.job, queueing.queue, pods, priority)


def _workload_active(
    queueing: kueue.Queueing | None, spec: DistributedTrainingJobSpec, old: JobStatus
) -> bool | None:
    """False when the job is suspended; True again on its resume only, so that a Workload Kueue itself
    deactivated (a rejected admission check, say) stays as Kueue left it."""
    if queueing is None or queueing.workload is None:
        return None
    if spec.run_policy.suspend:
        return False if queueing.active else None
    resuming = old.is_true(ConditionType.SUSPENDED)
    return True if resuming and not queueing.active else None


def _workload_status(
    queueing: kueue.Queueing | None, observed: Observed, new: JobStatus, now: datetime
) -> dict[str, Any] | None:
    """An evicted gang's quota handed back once no pod of it is left; a finished job's Workload Finished."""
    if queueing is None or queueing.workload is None:
        return None
    patch: dict[str, Any] | None = None
    if new.finished and queueing.state != kueue.State.FINISHED:
        succeeded = new.is_true(ConditionType.SUCCEEDED)
        patch = kueue.finished(
            queueing.workload, succeeded, f"the job {'succeeded' if succeeded else 'failed'}", timestamp(now)
        )
    elif queueing.state == kueue.State.EVICTED and not observed.pods:
        patch = kueue.admission_cleared(queueing.workload, timestamp(now))
    if patch is None:
        return None
    version = queueing.workload["metadata"].get("resourceVersion")
    return {
        "metadata": {"name": queueing.workload["metadata"]["name"], "resourceVersion": version},
        "status": patch,
    }


def _writes(
    decision: Decision,
    gang: Gang,
    observed: Observed,
    admitted: kueue.Queueing | None = None,
    kept: Sequence[PodView] = (),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Relabel]]:
    """The Service and NetworkPolicy to apply (if they differ), with the GPU NICs' ResourceClaimTemplate
    when pods that claim from it are created; the pods to create, the live pods to relabel; a
    Kueue-admitted gang's pods with what the admission adds. `kept`: the pods an in-place restart keeps,
    relabelled with the current attempt as its missing members are created."""
    action = decision.action
    keeps_gang = action in KEEPS_GANG and decision.reason != Reason.FINISHED
    if not keeps_gang and action not in (Action.SUSPEND, Action.RESTART_GANG):
        return [], [], []
    # The Service stays through a suspension or a restart: the gang comes back under the same names.
    # So does the NetworkPolicy: a pod is never up without it.
    apply = _differing(observed.service, render_service(gang))
    if gang.spec.network_policy.enabled:
        apply += _differing(observed.network_policy, render_network_policy(gang))
    if not keeps_gang:
        return apply, [], []
    create = action in CREATES
    present = {p.member: p for p in (*(kept if create else ()), *observed.of_attempt(gang.attempt))}
    spares = {p.name: p for p in observed.spares}
    # A spare that takes a rank is relabelled as the member it becomes (and is one from then on).
    present |= {m: spares[s] for s, m in decision.takeovers if create and s in spares}
    if (holder := present.get(gang.rank_zero.pod)) is not None and holder.name != gang.rank_zero.pod:
        gang = replace(gang, rendezvous_pod=holder.name)
    pod_sets = admitted.pod_sets if admitted is not None else {}

    def render(member: Member) -> dict[str, Any]:
        return render_pod(gang, member, kueue.pod_set_of(pod_sets, member.role))

    created = [render(m) for m in gang.members if create and m.pod not in present]
    if created and (claims := render_gpu_nic_claims(gang)) is not None:
        # Not watched: applied (a no-op when unchanged) before any pod that claims from it is created.
        apply.append(claims)
    live = [(m, present[m.pod]) for m in gang.members if m.pod in present and not present[m.pod].terminating]
    relabel = [r for m, pod in live if (r := _drifted(pod, render(m))) is not None]
    # Spares wait behind a whole gang: created before every member has a node, one could take it.
    if not created and all(m.pod in present and present[m.pod].node for m in gang.members):
        created += _spares_to_create(gang, observed, {s for s, _ in decision.takeovers}, pod_sets)
    return apply, created, relabel


def _spares_to_create(
    gang: Gang,
    observed: Observed,
    taking: set[str],
    pod_sets: Mapping[str, kueue.PodSetInfo],
) -> list[dict[str, Any]]:
    """The spares each role lacks (spec.replicas[].spares), named with the lowest numbers free: those
    pending or running count, not those ended or going, nor those taking a rank in this pass."""
    if not any(gang.spec.replica(role).spares for role in gang.spec.roles()):
        return []
    names = {p.name for p in (*observed.pods, *observed.spares)}
    created: list[dict[str, Any]] = []
    for role in gang.spec.roles():
        waiting = [
            p
            for p in observed.spares
            if p.role == role and p.name not in taking and p.state in ACTIVE_STATES and not p.terminating
        ]
        numbers = (n for n in itertools.count() if spare_pod_name(gang.job.name, role, n) not in names)
        for _, number in zip(range(gang.spec.replica(role).spares - len(waiting)), numbers, strict=False):
            created.append(render_spare(gang, role, number, kueue.pod_set_of(pod_sets, role)))
    return created


def _differing(observed: Mapping[str, Any] | None, desired: dict[str, Any]) -> list[dict[str, Any]]:
    """[desired] when the object is missing or differs from it, else nothing."""
    return [] if observed is not None and contains(observed, desired) else [desired]


def _policy_unwanted(spec: DistributedTrainingJobSpec, observed: Observed) -> list[Delete]:
    """The NetworkPolicy, once spec.networkPolicy.enabled is false again (the job's deletion takes it
    along otherwise, by its ownerReference)."""
    policy = observed.network_policy
    if spec.network_policy.enabled or policy is None or policy["metadata"].get("deletionTimestamp"):
        return []
    return [Delete("NetworkPolicy", policy["metadata"]["name"], policy["metadata"].get("uid") or None)]


def _drifted(pod: PodView, desired: Mapping[str, Any]) -> Relabel | None:
    """The owned labels and annotations of a live pod that differ from the render (others are left)."""
    meta = desired["metadata"]
    labels: dict[str, str | None] = {
        k: v for k, v in (meta.get("labels") or {}).items() if pod.labels.get(k) != v
    }
    if SPARE_LABEL in pod.labels and SPARE_LABEL not in (meta.get("labels") or {}):
        labels[SPARE_LABEL] = None
    wanted = dict(meta.get("annotations") or {})
    if ATTEMPT_RESYNC_ANNOTATION in wanted:
        # The attempt the pod's labels already say, so that it changes in a patch after the relabel's.
        if (landed := pod.labels.get(ATTEMPT_LABEL)) is not None:
            wanted[ATTEMPT_RESYNC_ANNOTATION] = landed
        else:
            del wanted[ATTEMPT_RESYNC_ANNOTATION]
    annotations = {k: v for k, v in wanted.items() if pod.annotations.get(k) != v}
    if not labels and not annotations:
        return None
    return Relabel(pod.name, pod.uid, labels, annotations)


def contains(observed: Any, desired: Any) -> bool:
    """Whether `observed` holds everything `desired` sets (fields the server defaulted are ignored)."""
    if isinstance(desired, Mapping):
        return isinstance(observed, Mapping) and all(
            k in observed and contains(observed[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(observed, list)
            and len(observed) == len(desired)
            and all(contains(o, d) for o, d in zip(observed, desired, strict=True))
        )
    return bool(observed == desired)


def _deletes(
    decision: Decision,
    attempt: int,
    observed: Observed,
    old: JobStatus,
    spec: DistributedTrainingJobSpec,
    kept: Sequence[PodView] = (),
) -> list[tuple[Delete, Event | None]]:
    """Pods of other attempts go, but those an in-place restart keeps (`kept`); the action decides about
    the current attempt's (a restart leaves them to the next pass, when they are stale). A pod already
    terminating is deleted again only when stuck on a lost node past its grace period: then by force, and
    an Event says so."""
    spared = {p.name for p in kept}
    doomed: list[PodView] = [p for p in observed.not_of_attempt(attempt) if p.name not in spared]
    current = observed.of_attempt(attempt)
    action = decision.action
    if action in (Action.SUSPEND, Action.DEADLINE_EXCEEDED):
        doomed += current
    elif action == Action.REPLACE_MEMBERS:
        doomed += [p for p in current if p.state in ENDED_ABNORMALLY]  # their names are taken till they go
    elif action in (Action.COMPLETE, Action.FAIL) or decision.reason == Reason.FINISHED:
        doomed += [p for p in current if _cleaned_up(p, _cleanup_policy(old, spec))]
    if action in (Action.SUSPEND, Action.DEADLINE_EXCEEDED, Action.COMPLETE, Action.FAIL) or (
        decision.reason == Reason.FINISHED
    ):
        doomed += observed.spares  # they wait for a gang that is gone
    else:
        doomed += [p for p in observed.spares if p.exited or p.state not in ACTIVE_STATES]
    deletes: list[tuple[Delete, Event | None]] = []
    for pod in doomed:
        if pod.stuck:
            message = f"pod {pod.name} was still terminating past its grace period on lost node {pod.node}"
            deletes.append(
                (Delete("Pod", pod.name, pod.uid or None, FORCE), Event("Warning", "ForceDeleted", message))
            )
        elif not pod.terminating:
            deletes.append((Delete("Pod", pod.name, pod.uid or None), None))
    return deletes


# Failures that remove every pod, whatever cleanPodPolicy says: a deadline, and a Workload finished
# under a running gang (its quota is released: the pods may not go on using it).
EVERY_POD_GOES: Final = (Reason.DEADLINE_EXCEEDED, Reason.WORKLOAD_FINISHED)


def _cleanup_policy(old: JobStatus, spec: DistributedTrainingJobSpec) -> CleanPodPolicy:
    failed = old.condition(ConditionType.FAILED)
    if failed is not None and failed.status == "True" and failed.reason in EVERY_POD_GOES:
        return CleanPodPolicy.ALL
    return spec.run_policy.clean_pod_policy


def _cleaned_up(pod: PodView, policy: CleanPodPolicy) -> bool:
    return policy == CleanPodPolicy.ALL or (policy == CleanPodPolicy.RUNNING and pod.state in ACTIVE_STATES)


def _requeue_after(
    decision: Decision, spec: DistributedTrainingJobSpec, observed: Observed, now: datetime
) -> float | None:
    if decision.action == Action.RESTART_GANG:
        return 0.0  # the next pass deletes the old attempt
    ttl = spec.run_policy.ttl_seconds_after_finished
    timers = [float(ttl) if decision.action in FINISHING and ttl is not None else decision.requeue_after]
    if (recheck := observed.recheck_at()) is not None:
        timers.append((recheck - now).total_seconds())
    return min((t for t in timers if t is not None), default=None)
