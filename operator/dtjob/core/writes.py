"""The writes a pass plans for the job's children, from its decision: the Service and NetworkPolicy to
apply, the pods to create (members and hot spares) and relabel, the pods to delete, and when to look again.

Writes only on change: a pod is created once and its spec never written again (a live pod's spec is
immutable, and a newer operator's render must not touch running pods: the next attempt gets it); only the
labels and annotations the operator owns are patched back when they drifted; the Service and the
NetworkPolicy are applied only when missing or differing from the render. Both stay while the job lives
(through suspensions, restarts and after it finished) and go with it by ownerReference; the NetworkPolicy
is deleted when spec.networkPolicy.enabled is set back to false.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from dtjob.api import CleanPodPolicy, ConditionType, DistributedTrainingJobSpec, JobStatus
from dtjob.core import kueue
from dtjob.core.decide import Action, Decision, Reason
from dtjob.core.frameworks import Gang, Member
from dtjob.core.names import ATTEMPT_LABEL, ATTEMPT_RESYNC_ANNOTATION, SPARE_LABEL, spare_pod_name
from dtjob.core.observed import ACTIVE_STATES, ENDED_ABNORMALLY, Observed, PodView
from dtjob.core.plan import Delete, Relabel
from dtjob.core.render import (
    render_gpu_nic_claims,
    render_network_policy,
    render_pod,
    render_service,
    render_spare,
)
from dtjob.core.status import FINISHING, Event

# Actions whose pass keeps the gang alive: missing pods are created, and the Service and the labels of the
# current attempt's pods drift back when edited.
KEEPS_GANG: Final = frozenset({Action.CREATE_MISSING, Action.WAIT, Action.REPLACE_MEMBERS})
# Actions that create the current attempt's missing pods.
CREATES: Final = frozenset({Action.CREATE_MISSING, Action.REPLACE_MEMBERS})
# Delete with no grace: the pod object goes at once, for one no kubelet will ever finish.
FORCE: Final = 0


def keeps_gang(decision: Decision) -> bool:
    return decision.action in KEEPS_GANG and decision.reason != Reason.FINISHED


def children_writes(
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
    keeping = keeps_gang(decision)
    if not keeping and action not in (Action.SUSPEND, Action.RESTART_GANG):
        return [], [], []
    # The Service stays through a suspension or a restart: the gang comes back under the same names.
    # So does the NetworkPolicy: a pod is never up without it.
    apply = _differing(observed.service, render_service(gang))
    if gang.spec.network_policy.enabled:
        apply += _differing(observed.network_policy, render_network_policy(gang))
    if not keeping:
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


def policy_unwanted(spec: DistributedTrainingJobSpec, observed: Observed) -> list[Delete]:
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


def deletes(
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


def requeue_after(
    decision: Decision, spec: DistributedTrainingJobSpec, observed: Observed, now: datetime
) -> float | None:
    if decision.action == Action.RESTART_GANG:
        return 0.0  # the next pass deletes the old attempt
    ttl = spec.run_policy.ttl_seconds_after_finished
    timers = [float(ttl) if decision.action in FINISHING and ttl is not None else decision.requeue_after]
    if (recheck := observed.recheck_at()) is not None:
        timers.append((recheck - now).total_seconds())
    return min((t for t in timers if t is not None), default=None)
