"""What refused a request, in the refuser's words, and a failed link told apart from a bug."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

import urllib3
from kubernetes import client
from pydantic import ValidationError

# Statuses of a create refused for what the object says (Bad Request, Unprocessable Entity: invalid).
SPEC_REFUSALS: Final = frozenset({400, 422})
ENV_PATH: Final = re.compile(r"spec\.(containers|initContainers)\[(\d+)\]\.env\[(\d+)\]")


class Refused(Exception):
    """The apiserver, or the client's schema check, refused a pod rendered from the job's spec: the same
    spec will be refused again (the message names the field)."""


def refused_pod(pod: Mapping[str, Any], why: str) -> str:
    """The refusal, and the names of the env entries it points at: the rendered pod's env starts with
    the variables the operator injects, so its indexes are not the template's."""
    named = []
    for kind, container, entry in ENV_PATH.findall(why):
        try:
            name = pod["spec"][kind][int(container)]["env"][int(entry)]["name"]
        except (KeyError, IndexError, TypeError):
            continue
        named.append(f"spec.{kind}[{container}].env[{entry}] is the variable {name!r}")
    return f"pod {pod['metadata']['name']}: {why}" + (
        f" ({'; '.join(dict.fromkeys(named))})" if named else ""
    )


def refusal(err: Exception) -> str | None:
    """What refused a request, in the refuser's words: the apiserver (its message names the field), or
    the client's own check of an object against the Kubernetes schema. None for anything else."""
    if isinstance(err, client.ApiException):
        try:
            return f"{err.status} {json.loads(err.body or '')['message']}"
        except (TypeError, ValueError, KeyError):
            return f"{err.status} {err.reason}"
    if isinstance(err, ValidationError):
        return "refused by the Kubernetes client's schema check: " + "; ".join(
            f"{_field_path(problem['loc'])}: {problem['msg']}" for problem in err.errors()
        )
    return None


def link_failure(err: Exception) -> str | None:
    """The link to the apiserver failed (refused, reset, timed out): expected while it restarts or the
    network is cut, and retried; what failed, in one line. None for anything else."""
    if isinstance(err, urllib3.exceptions.HTTPError):
        return f"{type(err).__name__}: {err}"
    return None


def _field_path(loc: tuple[int | str, ...]) -> str:
    """spec.containers[0].env[0].valueFrom, from the client's (argument index, field, index...) path."""
    parts = list(loc[1:] if loc and isinstance(loc[0], int) else loc)
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts).lstrip(".")
