"""The condition list a pass edits, the phase it sums up to, the Events its transitions deserve, and the
status of an invalid job."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from dtjob.api import Condition, ConditionType, JobStatus, Phase, timestamp
from dtjob.core.decide import Action, Reason

ConditionStatus = Literal["True", "False", "Unknown"]
WARNING_CONDITIONS: Final = frozenset(
    {
        ConditionType.FAILED,
        ConditionType.INVALID,
        ConditionType.UNSCHEDULABLE,
        ConditionType.CHECKPOINT_NOT_SHARED,
        ConditionType.SLOW_RANK,
    }
)
# Conditions whose return to False is news of its own (the others go False as a side effect of another event).
NEWSWORTHY_FALSE: Final = frozenset({ConditionType.SUSPENDED, ConditionType.INVALID})
FINISHING: Final = {Action.COMPLETE: ConditionType.SUCCEEDED, Action.FAIL: ConditionType.FAILED,
                    Action.DEADLINE_EXCEEDED: ConditionType.FAILED}  # fmt: skip


# Reasons of the Invalid condition: the spec breaks a rule the operator checks, or the apiserver refused
# a pod rendered from it (a field of the pod template only the apiserver validates).
INVALID_SPEC: Final = "InvalidSpec"
POD_REFUSED: Final = "PodRefused"


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class Conditions:
    """The condition list being edited in one pass."""

    def __init__(self, old: list[Condition], now: datetime, generation: int | None) -> None:
        self.items = list(old)
        self.now, self.generation = timestamp(now), generation

    def set(self, type_: ConditionType, status: ConditionStatus, reason: str, message: str = "") -> None:
        for i, old in enumerate(self.items):
            if old.type == type_:
                when = old.last_transition_time if old.status == status else self.now
                self.items[i] = self._make(type_, status, reason, message, when)
                return
        if status == "True":
            self.items.append(self._make(type_, status, reason, message, self.now))

    def is_true(self, type_: ConditionType) -> bool:
        return any(c.type == type_ and c.status == "True" for c in self.items)

    def _make(
        self, type_: ConditionType, status: ConditionStatus, reason: str, message: str, when: str
    ) -> Condition:
        return Condition(type=type_, status=status, reason=reason, message=message[:32768],
                         last_transition_time=when, observed_generation=self.generation)  # fmt: skip


def phase_of(conditions: Conditions) -> Phase:
    for type_, phase in (
        (ConditionType.INVALID, Phase.INVALID),
        (ConditionType.FAILED, Phase.FAILED),
        (ConditionType.SUCCEEDED, Phase.SUCCEEDED),
        (ConditionType.SUSPENDED, Phase.SUSPENDED),
        (ConditionType.QUEUED, Phase.QUEUED),
        (ConditionType.RESTARTING, Phase.RESTARTING),
        (ConditionType.RUNNING, Phase.RUNNING),
    ):
        if conditions.is_true(type_):
            return phase
    return Phase.PENDING


def invalid_status(
    old: JobStatus, message: str, now: datetime, generation: int | None, reason: str = INVALID_SPEC
) -> JobStatus:
    conditions = Conditions(old.conditions, now, generation)
    conditions.set(ConditionType.INVALID, "True", reason, message)
    return old.model_copy(
        update={
            "conditions": conditions.items,
            "phase": phase_of(conditions),
            "observed_generation": generation,
        }
    )


def transition_events(old: JobStatus, new: JobStatus) -> list[Event]:
    """One Event per gang restart, saying why, and one per condition that changed status otherwise:
    becoming True, or Suspended/Invalid becoming False."""
    before = {c.type: c.status for c in old.conditions}
    events: list[Event] = []
    if new.preflight is not None and new.preflight != old.preflight and new.preflight.passed:
        # A failed one is told by the Failed condition's Event, with the same figures.
        events.append(Event("Normal", "PreflightPassed", f"attempt {new.attempt}: {new.preflight.message}"))
    if new.restarts.replacements > old.restarts.replacements and new.elastic is not None:
        seen = set(old.elastic.replaced) if old.elastic is not None else set()
        for replacement in (r for r in new.elastic.replaced if r not in seen):
            message = f"attempt {new.attempt}: {replacement.message} until a new pod takes its place"
            events.append(Event("Warning", "MemberReplaced", message))
    if new.restarts.total > old.restarts.total and new.last_restart is not None:
        # Even while Restarting is already True (the new gang was preempted before it ran).
        why = new.last_restart
        events.append(Event("Warning", why.reason, f"attempt {new.attempt}: {why.message}"))
    for condition in new.conditions:
        if (
            condition.type == ConditionType.RESTARTING
            and condition.status == "True"
            and (condition.reason != Reason.SETTLING)
        ):
            continue  # told by the restart's own Event above
        if before.get(condition.type, "False") == condition.status:
            continue
        if condition.status == "True" or condition.type in NEWSWORTHY_FALSE:
            warning = condition.status == "True" and condition.type in WARNING_CONDITIONS
            events.append(Event("Warning" if warning else "Normal", condition.reason, condition.message))
    return events
