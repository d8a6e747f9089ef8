"""What one member's end means (fault_of), and how it is told in events and the status."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Final

from dtjob.api import TRAINER_CHECKPOINT_SAVED_EXIT_CODE, RestartPolicy, parse_timestamp
from dtjob.core.decide.decision import Facts, Fault
from dtjob.core.observed import IMAGE_ERRORS, PREEMPTED_CHECKPOINT_SAVED, PodState, PodView

# What of a pod's termination message goes into an Event and status.lastRestart (an Event's note is
# limited to 1 KiB in events.k8s.io/v1; the rest of the message says where the pod and its logs are).
MESSAGE_TAIL_CHARS: Final = 600


def fault_of(pod: PodView, restart_policy: RestartPolicy) -> tuple[Fault, str]:
    """What one member's abnormal end means for the gang, and a note saying why when it is not obvious.

    A pod lost without a word (deleted, or gone before its end was seen) is a failure, as in a Kubernetes
    Job: an eviction or a lost node says so on the pod (DisruptionTarget, a missing node) and is a
    preemption; what says nothing may as well be a controller or a person deleting a hung rank. The
    trainer's own word that it was stopped by SIGTERM and saved a checkpoint (exit code 200, or its
    termination message, which torchrun's exit code 1 does not change) is a preemption.
    """
    if pod.state == PodState.PREEMPTED:
        return Fault.PREEMPTION, ""
    if pod.deleted_by_hand:
        if restart_policy == RestartPolicy.NEVER:
            return Fault.PERMANENT, "restartPolicy Never"
        return Fault.RETRYABLE, ""
    if pod.reason == PREEMPTED_CHECKPOINT_SAVED or pod.exit_code == TRAINER_CHECKPOINT_SAVED_EXIT_CODE:
        return Fault.PREEMPTION, "the trainer was stopped by SIGTERM and saved a checkpoint"
    if pod.reason in IMAGE_ERRORS:
        return Fault.PERMANENT, "image errors that persist are permanent"
    if restart_policy == RestartPolicy.NEVER:
        return Fault.PERMANENT, "restartPolicy Never"
    if restart_policy == RestartPolicy.EXIT_CODE and pod.exit_code is not None and 1 <= pod.exit_code <= 127:
        return Fault.PERMANENT, "exit codes 1-127 are permanent under restartPolicy ExitCode"
    return Fault.RETRYABLE, ""


def vanished(facts: Facts) -> list[PodView]:
    """Members missing from an attempt whose pods were all created: lost before their end was seen."""
    attempt = facts.gang.attempt
    if facts.status.created_attempt != attempt:
        return []  # still being created: a missing pod is simply created
    message = "the pod is gone before its end was seen (deleted, or removed with its node)"
    return [
        PodView(name=m.pod, uid="", role=m.role, index=m.index, attempt=attempt,
                state=PodState.LOST, reason="Vanished", message=message)
        for m in facts.training if m.pod not in facts.current
    ]  # fmt: skip


# A kept member's trainer needs longer than this, from the start of the pass that moved its pod to the new
# attempt (status.goodput.lastRestart.createdAt), to join that attempt's rendezvous, resume and train to
# the end; an exit within it ended the attempt it was kept from. The pass relabels after its creates, on
# a loaded control plane seconds after its start (finishedAt has whole seconds), and a kept pod missed
# here stalls its gang for the rendezvous timeout; one taken wrongly costs a restart that resumes from
# its checkpoint. So the window is wide.
KEPT_MEMBER_JOIN_SECONDS: Final = 10.0
ENDED_BEFORE_ITS_ATTEMPT: Final = "EndedBeforeItsAttempt"


def ended_before_its_attempt(facts: Facts) -> list[PodView]:
    """Pods an in-place restart kept whose trainers exited 0 as the attempt they were kept from ended, just
    after the pass that moved them to the new one (its rank 0 evicted as the run finished): they never join
    the new attempt, whose other members wait for them in its rendezvous until it times out. Taken as
    preempted: the restart ended them, not their code."""
    status = facts.status
    last, cost = status.last_restart, status.goodput.last_restart if status.goodput else None
    if last is None or not last.in_place or cost is None or cost.attempt != status.attempt:
        return []
    if cost.created_at is None:
        return []
    restarted = parse_timestamp(last.time)
    joined_by = parse_timestamp(cost.created_at) + timedelta(seconds=KEPT_MEMBER_JOIN_SECONDS)
    message = (
        f"it exited 0 as attempt {status.attempt - 1} ended, after it was kept for attempt {status.attempt}, "
        "which it never joined"
    )
    return [
        replace(pod, state=PodState.PREEMPTED, reason=ENDED_BEFORE_ITS_ATTEMPT, message=message)
        for pod in facts.current.values()
        if pod.state == PodState.SUCCEEDED
        and pod.created is not None
        and pod.created < restarted
        and pod.ended_at is not None
        and pod.ended_at <= joined_by
    ]


def by_end(pods: list[PodView]) -> list[PodView]:
    """The first to end first (the root cause: its peers crash after it), in member order on a tie (the
    kubelet's finishedAt has seconds), those with no end time (lost) last."""
    return sorted(pods, key=lambda p: (p.ended_at is None, p.ended_at.timestamp() if p.ended_at else 0.0))


def describe_end(pod: PodView) -> str:
    """The pod, how it ended and the end of what it said (its termination message: with
    FallbackToLogsOnError, a crashed trainer's last log lines)."""
    parts = [f"pod {pod.name}: {pod.reason or pod.state}"]
    if pod.exit_code is not None:
        parts.append(f"exit code {pod.exit_code}")
    if pod.node:
        parts.append(f"on node {pod.node}")
    text = " ".join(parts[:1]) + (", " + ", ".join(parts[1:]) if parts[1:] else "")
    return f"{text}: {tail(pod.message)}" if pod.message.strip() else text


def tail(text: str, limit: int = MESSAGE_TAIL_CHARS) -> str:
    """The last lines of `text` that fit in `limit` characters (a Python traceback ends with the error)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    return "..." + (cut[cut.index("\n") :] if "\n" in cut else cut)
