"""The status as stored and as written: read as far as this operator understands it, dumped as JSON, and
written as the merge patch from the stored one."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from dtjob.api import JobStatus

# A status can hold only so many entries this version does not know; past that it is read as none.
MAX_STATUS_REPAIRS: Final = 20


def read_status(raw: Mapping[str, Any] | None) -> JobStatus:
    """The stored status, read as far as this operator understands it.

    A status written by another version (a rollback) may hold what this one cannot parse: a condition
    type, a phase or a role it does not know. Only those entries are dropped (the smallest part that
    holds the error: a list item, else the field); the attempt, the counters and everything else are
    kept, so that a rollback never restarts a gang or deletes a pod for it.
    """
    remaining = copy.deepcopy(dict(raw or {}))
    for _ in range(MAX_STATUS_REPAIRS):
        try:
            return JobStatus.model_validate(remaining)
        except ValidationError as error:
            for problem in sorted(error.errors(), key=_deepest_first):
                _drop(remaining, problem)
    return JobStatus(attempt=_int_or(remaining.get("attempt"), 1))


def _deepest_first(problem: ErrorDetails) -> tuple[int, ...]:
    # Drop list items from the highest index down, so earlier indexes stay valid.
    return tuple(-x if isinstance(x, int) else 0 for x in problem["loc"])


def _drop(status: dict[str, Any], problem: ErrorDetails) -> None:
    """Remove the innermost list item on the error's path, else the field it names."""
    loc = list(problem["loc"])
    cut = max((i for i, part in enumerate(loc) if isinstance(part, int)), default=len(loc) - 1)
    parent: Any = status
    for part in loc[:cut]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return
    with contextlib.suppress(KeyError, IndexError, TypeError):
        del parent[loc[cut]]


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and value >= 1 else default


def dump_status(status: JobStatus) -> dict[str, Any]:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def status_patch(stored: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns the stored status into `new`, the whole status a pass
    decided: a field `new` leaves out is written as null, which deletes it. A patch of `new` alone would
    keep every field the pass cleared (brokenSince after a settle window, say): a merge patch keeps what
    it omits. Lists are replaced whole, as a merge patch does anyway."""
    patch: dict[str, Any] = {key: None for key in (stored or {}) if key not in new}
    for key, value in new.items():
        old = (stored or {}).get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            if nested := status_patch(old, value):
                patch[key] = nested
        elif value != old:
            patch[key] = value
    return patch
