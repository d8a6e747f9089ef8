"""A pod of the gang that Kueue's pod integration took for a plain pod of its own.

Where a cluster turns on Kueue's `pod` framework, Kueue's pod webhook leaves alone a pod whose owner is a
job of an integration it knows (its `integrations.externalFrameworks`) and may read; any other pod that
names a queue, or sits in a namespace Kueue defaults to a LocalQueue, it gates (scheduling gate
`kueue.x-k8s.io/admission`) and admits on its own, as a one-pod Workload: the gang then starts pod by pod,
its quota counted apart from its own Workload's (Kueue v0.14.0, pkg/controller/jobs/pod/pod_webhook.go and
jobframework's FindAncestorJobManagedByKueue). The pod waits for a place the scheduler never sees, so it is
said as a pod that cannot be scheduled, with what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dtjob.core.kueue import GROUP

# Kueue's pod integration's gate (Kueue v0.14.0, pkg/controller/jobs/pod/constants/constants.go).
KUEUE_ADMISSION_GATE: Final = f"{GROUP}/admission"
HELD_BY_KUEUES_POD_INTEGRATION: Final = (
    f"held by Kueue's pod integration (scheduling gate {KUEUE_ADMISSION_GATE}), which admits each pod on "
    "its own instead of the gang: add DistributedTrainingJob.v1alpha1.training.dtjob.io to Kueue's "
    "integrations.externalFrameworks and let Kueue's controller read distributedtrainingjobs "
    "(docs/kueue.md#kueues-pod-integration)"
)


def held_by_kueues_pod_integration(pod: Mapping[str, Any]) -> bool:
    """The pod carries Kueue's admission gate (dtjob never adds it: its own gate is TAS's topology one)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == KUEUE_ADMISSION_GATE for gate in gates)
