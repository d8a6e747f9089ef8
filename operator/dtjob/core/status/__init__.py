"""The job's next status and the Events its transitions deserve. Pure; the only place the status is
written: `next_status` (next.py: counters, times, per-role counts, conditions, with the members' part in
members.py), then what a pass adds on top (of_pass.py: the goodput, the network chosen), the conditions'
builder, phase and Events (conditions.py), and the stored form (codec.py).

Conditions have the metav1.Condition shape; a condition keeps its lastTransitionTime while its status
stays the same, and is added only once it first becomes True (absent reads as False). The phase is a
summary of the conditions, for `kubectl get`.
"""

from dtjob.core.status.conditions import (
    FINISHING,
    INVALID_SPEC,
    POD_REFUSED,
    Event,
    invalid_status,
    transition_events,
)
from dtjob.core.status.next import next_status

__all__ = [
    "FINISHING",
    "INVALID_SPEC",
    "POD_REFUSED",
    "Event",
    "invalid_status",
    "next_status",
    "transition_events",
]
