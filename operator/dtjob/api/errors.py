"""Validation errors in the apiserver's words, so the operator's Invalid condition, the unit tests and
`kubectl apply` all say the same thing: `spec.replicas[0].count in body should be greater than or equal to 1`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails


def field_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _quoted(values: str) -> str:
    return ", ".join(f'"{v}"' for v in re.findall(r"'([^']*)'", values))


# pydantic error type -> the apiserver's wording (k8s.io/apiextensions-apiserver schema validation).
_WORDING: Final[dict[str, Callable[[str, Any, Mapping[str, Any]], str]]] = {
    "greater_than_equal": lambda p, _, c: f"{p} in body should be greater than or equal to {c['ge']}",
    "less_than_equal": lambda p, _, c: f"{p} in body should be less than or equal to {c['le']}",
    "too_short": lambda p, _, c: f"{p} in body should have at least {c['min_length']} items",
    "too_long": lambda p, v, c: f"{p}: Too many: {len(v)}: must have at most {c['max_length']} items",
    "string_too_short": lambda p, _, c: f"{p} in body should be at least {c['min_length']} chars long",
    "string_too_long": lambda p, _, c: f"{p}: Too long: may not be more than {c['max_length']} bytes",
    "string_pattern_mismatch": lambda p, _, c: f"{p} in body should match '{c['pattern']}'",
    "enum": lambda p, v, c: f'{p}: Unsupported value: "{v}": supported values: {_quoted(c["expected"])}',
    "literal_error": lambda p, v, c: (
        f'{p}: Unsupported value: "{v}": supported values: {_quoted(c["expected"])}'
    ),
    "missing": lambda p, _, c: f"{p}: Required value",
    "int_type": lambda p, _, c: f"{p} in body must be of type integer",
    "int_parsing": lambda p, _, c: f"{p} in body must be of type integer",
    "string_type": lambda p, _, c: f"{p} in body must be of type string",
    "bool_type": lambda p, _, c: f"{p} in body must be of type boolean",
    "bool_parsing": lambda p, _, c: f"{p} in body must be of type boolean",
    "dict_type": lambda p, _, c: f"{p} in body must be of type object",
    "model_type": lambda p, _, c: f"{p} in body must be of type object",
    "list_type": lambda p, _, c: f"{p} in body must be of type array",
}


def describe_error(error: ErrorDetails) -> str:
    path = field_path(error["loc"])
    wording = _WORDING.get(error["type"])
    if wording is not None:
        return wording(path, error.get("input"), error.get("ctx") or {})
    # Our own rules (value errors) already start with the field they are about.
    message = error["msg"].removeprefix("Value error, ")
    return f"{path}: {message}" if path and not message.startswith(path.split(".")[0]) else message


def describe(error: ValidationError) -> str:
    """One line per problem, each naming its field."""
    return "\n".join(describe_error(item) for item in error.errors())
