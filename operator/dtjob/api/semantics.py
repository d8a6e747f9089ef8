"""Problems the CRD's schema and CEL cannot see (inside the opaque pod template, or across fields in ways
too costly for CEL). The operator reports them as an Invalid condition instead of creating broken pods.

Warnings are about valid specs that will run, but not as the user likely hopes: they are reported, and
the pods are created all the same."""

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


def checkpoint_warnings(spec: DistributedTrainingJobSpec) -> list[str]:
    """Valid, but a gang restart would lose its progress: without a volume, checkpoint.path is a
    directory of each pod's own container filesystem, which goes with the pod."""
    pods = sum(replica.count for replica in spec.replicas)
    if pods <= 1 or spec.checkpoint.volume is not None:
        return []
    return [
        f"spec.checkpoint.volume is not set: each of the {pods} pods would checkpoint into its own "
        f"container filesystem at {spec.checkpoint.path}, which a gang restart discards, so the restarted "
        "gang cannot resume; set spec.checkpoint.volume to storage every pod mounts (e.g. a Filestore "
        "persistentVolumeClaim or GCS FUSE)"
    ]
