"""The trainer's environment: what the operator injects, merged with the template's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from dtjob.api import RestartStrategy
from dtjob.core.frameworks import Gang, Member, vertex_env, wiring
from dtjob.core.gke import library_path, nccl_env
from dtjob.core.progress import TOKEN_DIRECTORY
from dtjob.core.render.volumes import ATTEMPT_FILE

LIBRARY_PATH: Final = "LD_LIBRARY_PATH"


def merge_env(
    injected: Iterable[tuple[str, str, bool]], user: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Injected (name, value, overridable) entries, then the user's; see the package docstring for who wins."""
    user = list(user)
    user_names = {e.get("name") for e in user}
    injected = list(injected)
    owned = {name for name, _, overridable in injected if not overridable}
    merged: list[dict[str, Any]] = [
        {"name": name, "value": value}
        for name, value, overridable in injected
        if not (overridable and name in user_names)
    ]
    merged += [dict(e) for e in user if e.get("name") not in owned]
    return merged


def injected_env(
    gang: Gang, member: Member, gpu_role: bool, container: Mapping[str, Any]
) -> list[tuple[str, str, bool]]:
    spec = gang.spec
    framework = wiring(spec.framework)
    contract = [
        ("DTJ_JOB_NAME", gang.job.name),
        ("DTJ_ROLE", str(member.role)),
        ("DTJ_REPLICA_INDEX", str(member.index)),
        ("DTJ_ATTEMPT", str(gang.attempt)),
        ("DTJ_CHECKPOINT_DIR", spec.checkpoint.path),
        *framework.env(gang, member),
    ]
    if spec.run_policy.restart_strategy == RestartStrategy.IN_PLACE:
        contract.append(("DTJ_ATTEMPT_FILE", ATTEMPT_FILE))
    vertex = vertex_env(gang, member, framework.port(spec))
    tunables = [(name, value) for name, value in vertex if name != "CLUSTER_SPEC"]
    if gang.progress_url is not None:
        tunables += [
            ("DTJ_PROGRESS_URL", gang.progress_url),
            ("DTJ_PROGRESS_TOKEN_FILE", f"{TOKEN_DIRECTORY}/token"),
        ]
    contract += [(name, value) for name, value in vertex if name == "CLUSTER_SPEC"]
    if gpu_role:
        tunables += nccl_env(spec, gang.network, gang.autopilot)
    injected = [(name, value, False) for name, value in contract] + [
        (name, value, True) for name, value in tunables
    ]
    template_value = next(
        (e.get("value") for e in container.get("env") or [] if e.get("name") == LIBRARY_PATH), None
    )
    if gpu_role and (path := library_path(gang.network, template_value)) is not None:
        # Not overridable: it already holds the template's value, after the profile's directories.
        injected.append((LIBRARY_PATH, path, False))
    return injected
