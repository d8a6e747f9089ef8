"""The one pure entry point of the operator: a World in, a Plan of what to do out (or the Needs it must
read first).

One pass, in order: the spec parsed and checked; what the pass must read first (Needs); the attempt's
network (network.py); the gang and its children observed (observed.py); Kueue's word (kueue.py); the
decision (decide/: ordered rules); a Needs for a fresh listing when the decision takes members for lost;
then the status it leads to (status/) and the writes (writes.py, workload.py).

Nothing here raises on a bad spec: an invalid job gets an Invalid condition and a Warning event, and its
children are left alone. A spec whose pods the apiserver refuses (`refused_pods`) is Invalid too, until
the spec changes; the part of the gang created before the refusal goes, as it cannot form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from dtjob.api import ConditionType, DistributedTrainingJobSpec, JobStatus, parse_job
from dtjob.api.errors import describe
from dtjob.api.semantics import semantic_problems
from dtjob.core import kueue, progress
from dtjob.core.decide import Action, Decision, Facts, decide, kept_in_place
from dtjob.core.frameworks import Gang
from dtjob.core.names import JobRef
from dtjob.core.network import (
    RECHECK_SECONDS,
    AttemptNetwork,
    attempt_network,
    in_autopilot_mode,
    needs_gke_facts,
    paired,
)
from dtjob.core.observed import observe
from dtjob.core.plan import Delete, Plan
from dtjob.core.render import render_pod
from dtjob.core.status import INVALID_SPEC, POD_REFUSED, invalid_status, transition_events
from dtjob.core.status.codec import dump_status, read_status
from dtjob.core.status.of_pass import status_of_pass
from dtjob.core.workload import (
    failed_to_start,
    workload_spec,
    workload_status,
    workload_to_create,
    workload_to_delete,
)
from dtjob.core.workload_match import (
    default_queue,
    label_waits,
    priority_may_change,
    priority_moved,
    queue_in_force,
    queue_name_problem,
)
from dtjob.core.world import Needs, World
from dtjob.core.writes import children_writes, deletes, keeps_gang, policy_unwanted, requeue_after


def reconcile(world: World) -> Plan | Needs:
    job, now = world.job, world.now
    generation = job["metadata"].get("generation")
    old = read_status(job.get("status"))
    try:
        spec = parse_job(job).spec
    except ValidationError as error:
        return _invalid(old, describe(error), now, generation)
    if problems := semantic_problems(spec):
        return _invalid(old, "\n".join(problems), now, generation)
    if (problem := queue_name_problem(job)) is not None:
        return _invalid(old, problem, now, generation)
    if (defaulted := default_queue(job, world.kueue.routes)) is not None:
        return Plan(job_labels={kueue.QUEUE_LABEL: defaulted}, requeue_after=0.0)  # recorded first
    observed = observe(world.children, now, world.nodes)
    unqueued = bool(observed.live_of_attempt(old.attempt)) and not old.is_true(ConditionType.ADMITTED)
    queueing = _queueing(world, unqueued)
    if (needs := _inputs_needed(world, spec, old, queueing)) is not None:
        return needs
    network = attempt_network(spec, old, world.gke)
    if isinstance(network, str):
        # Not the spec's fault alone: an admin may create the Networks. Look again before long.
        return replace(_invalid(old, network, now, generation), requeue_after=RECHECK_SECONDS)
    gang = _gang(world, spec, old, network)
    if _pods_refused(old, generation):
        live = [pod for pod in observed.of_attempt(gang.attempt) if not pod.terminating]
        failed = failed_to_start(queueing, old.condition(ConditionType.INVALID), now)
        return Plan(delete=[Delete("Pod", pod.name, pod.uid or None) for pod in live], workload_status=failed)
    if (missing := _priority_missing(world, queueing, old)) is not None:
        return replace(_invalid(old, missing, now, generation), requeue_after=RECHECK_SECONDS)
    slow = progress.slow_ranks(world.ledger, gang.attempt)
    facts = Facts(spec, old, gang, observed, now, queueing, world.ledger, slow, generation)
    decision = decide(facts)
    if not world.listed and (confirm := decision.vanished + tuple(m for _, m in decision.takeovers)):
        return Needs(listing=confirm)
    return _plan(world, facts, decision, network)


def _queueing(world: World, unqueued_gang_running: bool) -> kueue.Queueing | None:
    """Where Kueue stands with the job's Workload, for a job in a Kueue queue (the queue in force: a
    label changed under a running job waits, workload_match.queue_in_force)."""
    facts = world.kueue
    queue = queue_in_force(world.job, facts.workload, unqueued_gang_running)
    if not queue:
        return None
    queueing = kueue.read(queue, facts.workload, facts.flavors, facts.served, facts.routes)
    if (waits := label_waits(world.job, queue)) is not None:
        queueing = replace(queueing, message=f"{queueing.message}; {waits}")
    return queueing


def _inputs_needed(
    world: World, spec: DistributedTrainingJobSpec, old: JobStatus, queueing: kueue.Queueing | None
) -> Needs | None:
    """What the pass lacks to decide, as far as it can tell before deciding: the cluster's Network objects
    (a profile that needs them, once an attempt), the priority class a Workload to create carries, or
    the class a queued job now names that its Workload, holding no quota, does not carry yet."""
    networks = needs_gke_facts(spec, old, world.gke)
    priority = None
    making = _workload_to_make(queueing, old)
    if making or priority_may_change(queueing):
        members = Gang.of(JobRef.of(world.job), spec, old.attempt)  # the priority class is the template's
        wanted = kueue.priority_class_of(world.job, [render_pod(members, m) for m in members.members])
        given = world.kueue.priority
        moved = (
            queueing is not None
            and queueing.workload is not None
            and priority_moved(queueing.workload, wanted)
        )
        if (making or moved) and (given is None or not given.answers(wanted)):
            priority = wanted
    return Needs(networks=networks, priority=priority) if networks or priority else None


def _workload_to_make(queueing: kueue.Queueing | None, old: JobStatus) -> bool:
    """A queued job that has no Workload yet and has not finished: the pass creates it (with its priority)."""
    return queueing is not None and queueing.state == kueue.State.MISSING and not old.finished


def _gang(world: World, spec: DistributedTrainingJobSpec, old: JobStatus, network: AttemptNetwork) -> Gang:
    settings = world.settings
    return replace(
        Gang.of(JobRef.of(world.job), spec, old.attempt, network.profile, settings.daemon_images),
        progress_url=settings.progress_url,
        avoided_nodes=tuple(old.avoided_nodes),
        autopilot=network.autopilot or in_autopilot_mode(spec, world.gke),
    )


def _priority_missing(world: World, queueing: kueue.Queueing | None, old: JobStatus) -> str | None:
    """Why a queued job's Workload cannot be created: the priority class it names does not exist."""
    priority = world.kueue.priority
    if not _workload_to_make(queueing, old):
        return None
    if priority is not None and priority.value is None:
        return f"the job names priority class {priority.class_name} ({priority.source}), which does not exist"
    return None


def _plan(world: World, facts: Facts, decision: Decision, network: AttemptNetwork) -> Plan:
    spec, old, gang, observed, queueing = facts.spec, facts.status, facts.gang, facts.observed, facts.queueing
    chosen = paired(network.chosen, gang.daemon_image, world.gke, gang.autopilot)
    admitted = facts.admitted
    new, events = status_of_pass(facts, decision, chosen)
    kept = kept_in_place(old, observed) if keeps_gang(decision) else ()
    planned_deletes = deletes(decision, gang.attempt, observed, old, spec, kept)
    service, pods, relabel = children_writes(decision, gang, observed, admitted, kept)
    return Plan(
        create=pods,
        apply=service,
        workload=workload_to_create(world.job, gang, queueing, new, world.kueue.priority),
        workload_status=workload_status(queueing, gang, observed, new, world.now),
        workload_spec=workload_spec(world.job, gang, queueing, spec, old, world.kueue.priority),
        relabel=relabel,
        delete=[delete for delete, _ in planned_deletes]
        + policy_unwanted(spec, observed)
        + workload_to_delete(world.kueue.workload, queueing),
        status=_changed(old, new),
        events=events + [event for _, event in planned_deletes if event is not None],
        delete_job=decision.action == Action.TTL_EXPIRED,
        requeue_after=requeue_after(decision, spec, observed, world.now),
    )


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
