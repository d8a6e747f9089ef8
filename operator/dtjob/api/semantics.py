"""Problems the CRD's schema and CEL cannot see (inside the opaque pod template, or across fields in ways
too costly for CEL). The operator reports them as an Invalid condition instead of creating broken pods.

Warnings are about valid specs that will run, but not as the user likely hopes: they are reported, and
the pods are created all the same."""

from __future__ import annotations

from typing import Any, Final

from dtjob.api.spec import DistributedTrainingJobSpec

# The template fields the operator merges into (desired.render_pod), with the JSON type each must have:
# a template that gives one another type is reported here, instead of failing every pass.
_POD_FIELDS: Final[dict[tuple[str, ...], type]] = {
    ("metadata", "labels"): dict,
    ("metadata", "annotations"): dict,
    ("spec", "volumes"): list,
    ("spec", "initContainers"): list,
    ("spec", "tolerations"): list,
    ("spec", "nodeSelector"): dict,
    ("spec", "securityContext"): dict,
}
_CONTAINER_FIELDS: Final[dict[str, type]] = {
    "env": list,
    "ports": list,
    "volumeMounts": list,
    "resources": dict,
    "name": str,
    "image": str,
    "terminationMessagePolicy": str,
}
# Lists whose items the operator reads by key: each item must be an object.
_OBJECT_ITEMS: Final = {"volumes", "initContainers", "tolerations", "env", "ports", "volumeMounts"}
_TYPE_NAMES: Final[dict[type, str]] = {dict: "an object", list: "a list", str: "a string"}


def semantic_problems(spec: DistributedTrainingJobSpec) -> list[str]:
    problems = []
    for i, replica in enumerate(spec.replicas):
        template = f"spec.replicas[{i}].template"
        problems += _shape_problems(template, replica.template, _POD_FIELDS)
        for j, container in enumerate(replica.template["spec"]["containers"]):
            path = f"{template}.spec.containers[{j}]"
            if not isinstance(container, dict):
                problems.append(f"{path} must be an object")
                continue
            problems += [
                f"{path}.{field} is required" for field in ("name", "image") if not container.get(field)
            ]
            problems += _shape_problems(path, container, {(k,): t for k, t in _CONTAINER_FIELDS.items()})
    nproc = spec.torch.nproc_per_node
    if spec.accelerator is not None and isinstance(nproc, int) and nproc > spec.accelerator.count:
        problems.append(
            f"spec.torch.nprocPerNode ({nproc}) exceeds spec.accelerator.count ({spec.accelerator.count}): "
            "torchrun would start more processes than the pod has GPUs"
        )
    return problems


def _shape_problems(path: str, owner: dict[str, Any], fields: dict[tuple[str, ...], type]) -> list[str]:
    """Fields of `owner` present (not null) with another JSON type than `fields` gives, or a list of
    them holding something other than objects."""
    problems = []
    for keys, kind in fields.items():
        value: Any = owner
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        where = ".".join([path, *keys])
        if value is None:
            continue
        if not isinstance(value, kind):
            problems.append(f"{where} must be {_TYPE_NAMES[kind]}")
        elif isinstance(value, list) and keys[-1] in _OBJECT_ITEMS:
            problems += [
                f"{where}[{n}] must be an object"
                for n, item in enumerate(value)
                if not isinstance(item, dict)
            ]
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
