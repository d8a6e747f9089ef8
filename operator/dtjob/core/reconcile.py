"""The one pure entry point of the operator: a World in, a Plan of what to do out (or the Needs it must
read first).

One pass, top to bottom: the gates, the outcomes that end a pass before anything is decided, as one
ordered table, `GATES` (the spec parsed and checked, the queue's label, what the pass must read first, the
attempt's network, pods the apiserver refused, a missing priority class), the way core/decide's `RULES`
order the decisions: a gate returns the pass's outcome (a Plan, or the Needs to read first) or nothing,
and the first that returns one ends the pass. Then the decision (decide/: `RULES` in order, then the
gang's steps) on the pass's `Facts`; a Needs for a fresh listing when the decision takes members for lost;
then the status it leads to (status/) and the writes (writes.py, workload.py).

Each gate reads what it needs of the pass from a `Reading`, which derives each thing once, when a gate
first asks for it (the spec parsed, the children observed, Kueue's word, the attempt's network, the
gang), so that a pass a gate ends derives nothing past it; a pass through every gate takes its `Facts`
from the same Reading.

Nothing here raises on a bad spec: an invalid job gets an Invalid condition and a Warning event, and its
children are left alone. A spec whose pods the apiserver refuses (`refused_pods`) is Invalid too, until
the spec changes; the part of the gang created before the refusal goes, as it cannot form. Every outcome
that writes a status writes it through `status_change` and `transition_events`, as a decided pass does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from typing import Any, Final

from pydantic import ValidationError

from dtjob.api import ConditionType, DistributedTrainingJobSpec, JobStatus, parse_job
from dtjob.api.errors import describe
from dtjob.api.semantics import semantic_problems
from dtjob.core import kueue, kueue_priority, network, progress, workload_match
from dtjob.core.decide import Action, Decision, Facts, decide, kept_in_place
from dtjob.core.frameworks import Gang
from dtjob.core.gke import NetworkChoice
from dtjob.core.names import JobRef
from dtjob.core.network import RECHECK_SECONDS, AttemptNetwork, PassNetwork
from dtjob.core.observed import Observed, nodes_to_judge, observe
from dtjob.core.plan import Delete, Plan
from dtjob.core.render import render_pod
from dtjob.core.status import INVALID_SPEC, POD_REFUSED, invalid_status, transition_events
from dtjob.core.status.codec import dump_status, read_status
from dtjob.core.status.of_pass import status_of_pass
from dtjob.core.workload import (
    deactivated,
    failed_to_start,
    gang_needs,
    workload_spec,
    workload_status,
    workload_to_create,
    workload_to_delete,
)
from dtjob.core.workload_match import PassQueue, priority_moved
from dtjob.core.world import Needs, World
from dtjob.core.writes import children_writes, deletes, keeps_gang, policy_unwanted, requeue_after


def reconcile(world: World) -> Plan | Needs:
    reading = Reading(world, read_status(world.job.get("status")))
    for gate in GATES:
        if (outcome := gate(reading)) is not None:
            return outcome
    facts = reading.facts
    decision = decide(facts)
    if not world.listed and (confirm := decision.vanished + tuple(m for _, m in decision.takeovers)):
        return Needs(listing=confirm)
    return _plan(world, facts, decision, reading.network.chosen)


@dataclass(frozen=True)
class Reading:
    """What a pass knows of its job, each part derived once, when first asked for."""

    world: World
    old: JobStatus
    """The status as stored: every outcome starts from it."""

    @property
    def generation(self) -> int | None:
        generation: int | None = self.world.job["metadata"].get("generation")
        return generation

    @cached_property
    def parsed(self) -> DistributedTrainingJobSpec | ValidationError:
        try:
            return parse_job(self.world.job).spec
        except ValidationError as error:
            return error

    @property
    def spec(self) -> DistributedTrainingJobSpec:
        """The spec, for the gates after `spec_unparsed` (which ends a pass whose spec does not parse)."""
        if isinstance(self.parsed, ValidationError):
            raise self.parsed
        return self.parsed

    @cached_property
    def observed(self) -> Observed:
        return observe(self.world.children, self.world.now, self.world.nodes)

    @cached_property
    def queue(self) -> PassQueue:
        """The job's queue label, and where Kueue stands with its Workload (the queue in force: a label
        changed under a running job waits, workload_match.queue_in_force)."""
        old = self.old
        unqueued = bool(self.observed.live_of_attempt(old.attempt)) and not old.is_true(
            ConditionType.ADMITTED
        )
        return workload_match.of_pass(self.world.job, self.world.kueue, unqueued)

    @property
    def queueing(self) -> kueue.Queueing | None:
        return self.queue.queueing

    @cached_property
    def network(self) -> PassNetwork:
        return network.of_pass(self.spec, self.old, self.world.gke, self.world.settings.daemon_images)

    @property
    def usable_network(self) -> AttemptNetwork:
        """The attempt's network, for what follows `network_unavailable` (which ends a pass without one)."""
        if isinstance(attempt := self.network.attempt, str):
            raise ValueError(attempt)
        return attempt

    @cached_property
    def facts(self) -> Facts:
        """What the decision and the status read, for a pass through every gate."""
        world, spec, old, attempt = self.world, self.spec, self.old, self.usable_network
        settings = world.settings
        gang = replace(
            Gang.of(JobRef.of(world.job), spec, old.attempt, attempt.profile, attempt.daemon_image),
            progress_url=settings.progress_url,
            avoided_nodes=tuple(old.avoided_nodes),
            autopilot=self.network.autopilot,
        )
        slow = progress.slow_ranks(world.ledger, gang.attempt)
        return Facts(
            spec, old, gang, self.observed, world.now, self.queueing, world.ledger, slow, self.generation
        )


Gate = Callable[[Reading], Plan | Needs | None]


def spec_unparsed(reading: Reading) -> Plan | None:
    parsed = reading.parsed
    return _invalid(reading, describe(parsed)) if isinstance(parsed, ValidationError) else None


def spec_inconsistent(reading: Reading) -> Plan | None:
    problems = semantic_problems(reading.spec)
    return _invalid(reading, "\n".join(problems)) if problems else None


def queue_name_invalid(reading: Reading) -> Plan | None:
    problem = reading.queue.label_problem
    return _invalid(reading, problem) if problem is not None else None


def queue_defaulted(reading: Reading) -> Plan | None:
    """A job in a namespace whose LocalQueue is the default gets its label, recorded before anything."""
    defaulted = reading.queue.default
    return (
        Plan(job_labels={kueue.QUEUE_LABEL: defaulted}, requeue_after=0.0) if defaulted is not None else None
    )


def inputs_missing(reading: Reading) -> Needs | None:
    """What the pass lacks to decide, as far as it can tell before deciding: what the caches may lag on
    (the nodes of its pods they lack, whether the pods created that the watch has not delivered exist), the
    cluster's Network objects (a profile that needs them, once an attempt), the priority class a Workload
    to create carries, or the class a queued job now names that its Workload, holding no quota, does not
    carry yet."""
    world, spec, old, queueing = reading.world, reading.spec, reading.old, reading.queueing
    nodes, overdue = uncached_nodes(world), world.from_caches and bool(world.overdue)
    networks = reading.network.unread
    priority = None
    making = _workload_to_make(queueing, old)
    if making or reading.queue.priority_may_change:
        members = Gang.of(JobRef.of(world.job), spec, old.attempt)  # the priority class is the template's
        wanted = kueue_priority.priority_class_of(
            world.job, [render_pod(members, m) for m in members.members]
        )
        given = world.kueue.priority
        moved = (
            queueing is not None
            and queueing.workload is not None
            and priority_moved(queueing.workload, wanted)
        )
        if (making or moved) and (given is None or not given.answers(wanted)):
            priority = wanted
    if not (nodes or overdue or networks or priority):
        return None
    return Needs(nodes=nodes, overdue=overdue, networks=networks, priority=priority)


def uncached_nodes(world: World) -> tuple[str, ...]:
    """The nodes whose state the pass judges (observed.nodes_to_judge) that the caches lack: a node watch
    behind the pods' would make a new node look deleted."""
    if not world.from_caches or world.nodes is None:
        return ()
    cached = {node["metadata"]["name"] for node in world.nodes}
    return tuple(name for name in nodes_to_judge(world.children) if name not in cached)


def network_unavailable(reading: Reading) -> Plan | None:
    if isinstance(unavailable := reading.network.attempt, str):
        # Not the spec's fault alone: an admin may create the Networks. Look again before long.
        return replace(_invalid(reading, unavailable), requeue_after=RECHECK_SECONDS)
    return None


def pods_refused(reading: Reading) -> Plan | None:
    """The apiserver refused the pods of this very generation of the spec: the gang's live pods go."""
    old = reading.old
    invalid = old.condition(ConditionType.INVALID)
    if (
        invalid is None
        or invalid.status != "True"
        or invalid.reason != POD_REFUSED
        or invalid.observed_generation != reading.generation
    ):
        return None
    live = [pod for pod in reading.observed.of_attempt(old.attempt) if not pod.terminating]
    failed = failed_to_start(reading.queueing, invalid, reading.world.now)
    return Plan(delete=[Delete("Pod", pod.name, pod.uid or None) for pod in live], workload_status=failed)


def priority_class_missing(reading: Reading) -> Plan | None:
    """A queued job's Workload cannot be created: the priority class it names does not exist."""
    priority = reading.world.kueue.priority
    if not _workload_to_make(reading.queueing, reading.old) or priority is None or priority.value is not None:
        return None
    missing = f"the job names priority class {priority.class_name} ({priority.source}), which does not exist"
    return replace(_invalid(reading, missing), requeue_after=RECHECK_SECONDS)


# In the order they take precedence.
GATES: Final[tuple[Gate, ...]] = (
    spec_unparsed,
    spec_inconsistent,
    queue_name_invalid,
    queue_defaulted,
    inputs_missing,
    network_unavailable,
    pods_refused,
    priority_class_missing,
)


def _plan(world: World, facts: Facts, decision: Decision, chosen: NetworkChoice | None) -> Plan:
    """`chosen`: the network chosen in this pass (network.PassNetwork.chosen), recorded in status.nccl."""
    spec, old, gang, observed, queueing = facts.spec, facts.status, facts.gang, facts.observed, facts.queueing
    admitted = queueing if queueing is not None and queueing.state == kueue.State.ADMITTED else None
    new, events = status_of_pass(facts, decision, chosen)
    kept = kept_in_place(old, observed) if keeps_gang(decision) else ()
    planned_deletes = deletes(decision, gang.attempt, observed, old, spec, kept)
    service, pods, relabel = children_writes(decision, gang, observed, admitted, kept)
    return Plan(
        create=pods,
        apply=service,
        workload=workload_to_create(world.job, gang, queueing, new, world.kueue.priority),
        workload_status=workload_status(queueing, gang, observed, new, world.now, gang_needs(spec, gang)),
        workload_spec=workload_spec(world.job, gang, queueing, spec, old, world.kueue.priority),
        relabel=relabel,
        delete=[delete for delete, _ in planned_deletes]
        + policy_unwanted(spec, observed)
        + workload_to_delete(world.kueue.workload, queueing),
        status=status_change(old, new),
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
    return _invalid_plan(read_status(job.get("status")), message, now, generation, POD_REFUSED)


def status_change(old: JobStatus, new: JobStatus) -> dict[str, Any] | None:
    """The status to write: `new` dumped, or None when it says what `old` says."""
    new_dump = dump_status(new)
    return None if new_dump == dump_status(old) else new_dump


def _invalid(reading: Reading, message: str) -> Plan:
    """The job Invalid, saying why; its Workload, if it waits for quota, deactivated (it makes no pods)."""
    plan = _invalid_plan(reading.old, message, reading.world.now, reading.generation, INVALID_SPEC)
    return replace(plan, workload_spec=deactivated(reading.world.kueue.workload))


def _invalid_plan(old: JobStatus, message: str, now: datetime, generation: int | None, reason: str) -> Plan:
    new = invalid_status(old, message, now, generation, reason)
    return Plan(status=status_change(old, new), events=transition_events(old, new))


def _workload_to_make(queueing: kueue.Queueing | None, old: JobStatus) -> bool:
    """A queued job that has no Workload yet and has not finished: the pass creates it (with its priority)."""
    return queueing is not None and queueing.state == kueue.State.MISSING and not old.finished
