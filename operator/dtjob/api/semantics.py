"""Problems the CRD's schema and CEL cannot see (inside the opaque pod template, or across fields in ways
too costly for CEL). The operator reports them as an Invalid condition instead of creating broken pods."""

from __future__ import annotations

from dtjob.api.spec import DistributedTrainingJobSpec


def semantic_problems(spec: DistributedTrainingJobSpec) -> list[str]:
    problems = []
    for i, replica in enumerate(spec.replicas):
        for j, container in enumerate(replica.template["spec"]["containers"]):
            path = f"spec.replicas[{i}].template.spec.containers[{j}]"
            if not isinstance(container, dict):
                problems.append(f"{path} must be an object")
                continue
            problems += [
                f"{path}.{field} is required" for field in ("name", "image") if not container.get(field)
            ]
    nproc = spec.torch.nproc_per_node
    if spec.accelerator is not None and isinstance(nproc, int) and nproc > spec.accelerator.count:
        problems.append(
            f"spec.torch.nprocPerNode ({nproc}) exceeds spec.accelerator.count ({spec.accelerator.count}): "
            "torchrun would start more processes than the pod has GPUs"
        )
    return problems
