"""NCCL's environment from the node: the exports of the GPU network plugin's env script, applied at start.

Google's recipes for GKE's GPUDirect machines `source` the env script the plugin's installer put on the
node (gIB: /usr/local/gib/scripts/set_nccl_env.sh, "Google expects to update them in future NCCL/gIB
releases"; docs/gke.md) before they launch the trainer, then set the few variables they override. The
operator names the script in DTJ_NCCL_ENV_SCRIPT; the trainer and the NCCL preflight call `apply()` before
NCCL starts (init_distributed, multi_worker_mirrored_strategy, the preflight's main), so both run with the
same environment whatever their shell does. Who wins, first to last:

1. the process's own environment: the image's, the pod template's, spec.nccl.env and the variables the
   operator renders in the pod (the recipes' overrides: the tuner config, the socket interfaces);
2. the script's exports, when the script exists and runs;
3. otherwise dtjob's fallback values, rendered by the operator as DTJ_NCCL_FALLBACK_<NAME>=<value>: what
   the plugin's script set when dtjob's values were read (it is not published), used only without it.

The script runs in bash (`source`, as the recipes do) rather than being parsed: it is unpublished and may
hold more than `export NAME=value` lines (conditions, expansions of other variables), which only a shell
reads right. Its exports are what `env` shows changed after sourcing it. A script that cannot run (no
bash, an error before its exports, a timeout) counts as absent, with a warning saying why.

`apply()` records what it did in DTJ_NCCL_ENV_APPLIED (`script` or `fallback`), so a second call in the
process, or in a child it starts, changes nothing.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

SCRIPT_VARIABLE: Final = "DTJ_NCCL_ENV_SCRIPT"
FALLBACK_PREFIX: Final = "DTJ_NCCL_FALLBACK_"
APPLIED_VARIABLE: Final = "DTJ_NCCL_ENV_APPLIED"
SCRIPT_TIMEOUT_SECONDS: Final = 30.0
# The environment before and after sourcing the script, in one shell, NUL-separated (values may hold
# newlines), each followed by an empty entry: the shell's own variables are in both, the script's changes
# only after. A script that ends the shell (`exit`) leaves the second one out.
_SOURCE_AND_SHOW: Final = 'env -0 && printf "\\0" && source "$0" >&2 </dev/null; env -0 && printf "\\0"'


class Source(StrEnum):
    """Where NCCL's tuning came from."""

    SCRIPT = "script"
    """The node's env script."""
    FALLBACK = "fallback"
    """dtjob's own values: the script named was absent or did not run."""


@dataclass(frozen=True)
class NcclEnv:
    """What `apply` sets in the process and what it leaves as the process has it."""

    source: Source
    applied: Mapping[str, str]
    kept: tuple[str, ...]
    """Names the script (or the fallback) sets that the process's environment already has: those win."""
    why_fallback: str = ""


class ScriptError(RuntimeError):
    """The env script could not be sourced; the message says why."""


def script_exports(script: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """What sourcing `script` in bash, in `environ`, exports that `environ` does not already hold as is."""
    try:
        shown = subprocess.run(
            ["bash", "-c", _SOURCE_AND_SHOW, str(script)],
            env=dict(environ),
            capture_output=True,
            timeout=SCRIPT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ScriptError(f"bash could not source it: {error}") from error
    entries = shown.stdout.split(b"\0")[:-1]  # the output ends with a NUL
    marks = [i for i, entry in enumerate(entries) if not entry]
    if len(marks) != 2 or marks[1] != len(entries) - 1:
        stderr = shown.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise ScriptError(f"sourcing it ended the shell (exit {shown.returncode}): {' / '.join(stderr)}")
    before, after = _variables(entries[: marks[0]]), _variables(entries[marks[0] + 1 : marks[1]])
    return {name: value for name, value in after.items() if before.get(name) != value}


def _variables(entries: list[bytes]) -> dict[str, str]:
    pairs = (os.fsdecode(e).partition("=") for e in entries if e)
    return {name: value for name, _, value in pairs}


def fallback_values(environ: Mapping[str, str]) -> dict[str, str]:
    """dtjob's fallback values, as the operator rendered them (DTJ_NCCL_FALLBACK_<NAME>)."""
    return {k.removeprefix(FALLBACK_PREFIX): v for k, v in environ.items() if k.startswith(FALLBACK_PREFIX)}


def resolve(environ: Mapping[str, str], values: Mapping[str, str], source: Source, why: str = "") -> NcclEnv:
    """`values` (the script's exports or the fallback) under the process's environment, which wins."""
    applied = {name: value for name, value in values.items() if name not in environ}
    kept = tuple(sorted(name for name in values if name in environ and environ[name] != values[name]))
    return NcclEnv(source, applied, kept, why)


def nccl_env(environ: Mapping[str, str]) -> NcclEnv | None:
    """What the process gets: from the script DTJ_NCCL_ENV_SCRIPT names, else the fallback; None when the
    pod names no script (a profile without one, a CPU pod)."""
    script = environ.get(SCRIPT_VARIABLE)
    if not script:
        return None
    path = Path(script)
    if not path.is_file():
        why = f"{script} is absent (the node's GPU network plugin installer has not put it there)"
    else:
        try:
            return resolve(environ, script_exports(path, environ), Source.SCRIPT)
        except ScriptError as error:
            why = f"{script} did not run: {error}"
    return resolve(environ, fallback_values(environ), Source.FALLBACK, why)


def apply(environ: MutableMapping[str, str] = os.environ) -> Source | None:
    """Apply NCCL's environment to `environ` (the process's) and log where it came from; the source, or
    None when there is no script to apply. Call before NCCL starts: it reads its variables then."""
    if (recorded := environ.get(APPLIED_VARIABLE)) in tuple(Source):
        return Source(recorded)
    resolved = nccl_env(environ)
    if resolved is None:
        return None
    environ.update(resolved.applied)
    environ[APPLIED_VARIABLE] = resolved.source.value
    values = ", ".join(f"{k}={v}" for k, v in sorted(resolved.applied.items())) or "none"
    kept = f"; the pod's own values win for {', '.join(resolved.kept)}" if resolved.kept else ""
    if resolved.source == Source.SCRIPT:
        log.info("NCCL env from %s: %s%s", environ[SCRIPT_VARIABLE], values, kept)
    else:
        log.warning(
            "NCCL env: %s; using dtjob's fallback values instead, which may be older than the plugin on "
            "this node: %s%s", resolved.why_fallback, values, kept,
        )  # fmt: skip
    return resolved.source
