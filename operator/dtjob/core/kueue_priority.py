"""A queued job's Workload priority, as Kueue's job integrations pick it: the class the job names (a
WorkloadPriorityClass label, else its pods' PriorityClass), else the cluster's globalDefault."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

# Kueue's names, as its API spells them (apis/kueue/constants).
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
WORKLOAD_PRIORITY_CLASSES: Final = "workloadpriorityclasses"
# Where a Workload's priority comes from (its spec.priorityClassSource), as Kueue names the two sources.
WORKLOAD_PRIORITY_SOURCE: Final = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_SOURCE: Final = "scheduling.k8s.io/priorityclass"


@dataclass(frozen=True)
class Priority:
    """A Workload's priority: the class named, where it is defined, and its value (None: no such class)."""

    source: str
    class_name: str
    value: int | None = None
    global_default: bool = False
    """The job names no class: the cluster's globalDefault PriorityClass is the Workload's (class_name
    empty and value 0 where the cluster has none), as Kueue's integrations take it."""

    def answers(self, wanted: Priority) -> bool:
        """Whether this read is the one `wanted` asked for."""
        if wanted.global_default:
            return self.global_default
        return (self.source, self.class_name) == (wanted.source, wanted.class_name)


GLOBAL_DEFAULT_PRIORITY: Final = Priority(POD_PRIORITY_SOURCE, "", global_default=True)


def global_default_priority(classes: Iterable[tuple[str, int, bool]]) -> Priority:
    """The cluster's globalDefault PriorityClass among `classes` (name, value, globalDefault), as Kueue
    takes it (pkg/util/priority: getDefaultPriorityClass): with more than one (a race the apiserver
    allows), the lowest value, the first listed of equals; none, value 0 and no name."""
    default: tuple[str, int] | None = None
    for name, value, is_default in classes:
        if is_default and (default is None or value < default[1]):
            default = (name, value)
    name, value = default or ("", 0)
    return Priority(POD_PRIORITY_SOURCE, name, value, global_default=True)


def priority_class_of(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Priority:
    """The priority class a queued job names, as Kueue's integrations pick it: the job's
    `kueue.x-k8s.io/priority-class` label (a WorkloadPriorityClass), else its pods' priorityClassName,
    else the cluster's globalDefault PriorityClass (pkg/util/priority: GetPriorityFromPriorityClass)."""
    if name := (job["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL):
        return Priority(WORKLOAD_PRIORITY_SOURCE, name)
    for pod in pods:
        if name := pod["spec"].get("priorityClassName"):
            return Priority(POD_PRIORITY_SOURCE, name)
    return GLOBAL_DEFAULT_PRIORITY
