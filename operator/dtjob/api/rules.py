"""One definition per validation rule: the CEL the apiserver runs and the Python mirror the model runs.

A rule's message is written once, here, so `kubectl apply` (CEL in the CRD) and the operator (pydantic)
reject a bad manifest with the same words. Messages start with the path of the field they are about.
Transition rules (those that read `oldSelf`) only exist in CEL: there is no old object in a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel


@dataclass(frozen=True)
class Rule:
    cel: str
    message: str
    # The Python mirror of `cel`, given the validated model; None for transition rules (CEL only).
    holds: Callable[[Any], bool] | None = None

    def as_validation(self) -> dict[str, str]:
        return {"rule": self.cel, "message": self.message}


def _add_rules(schema: dict[str, Any], cls: type[Any]) -> None:
    rules: tuple[Rule, ...] = getattr(cls, "rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.as_validation() for rule in rules]


class WireModel(BaseModel):
    """camelCase on the wire, snake_case in Python, immutable, unknown fields rejected (as `kubectl
    apply --validate=strict` does), and the class's `rules` both enforced and exported to the CRD."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
        json_schema_extra=_add_rules,
    )

    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> WireModel:
        for rule in self.rules:
            if rule.holds is not None and not rule.holds(self):
                raise ValueError(rule.message)
        return self


def reject_duplicates(path: str, keys: list[str]) -> None:
    """The mirror of `x-kubernetes-list-type: map`: the apiserver answers "Duplicate value" for a repeated key."""
    seen: set[str] = set()
    for index, key in enumerate(keys):
        if key in seen:
            raise ValueError(f'{path}[{index}]: Duplicate value: "{key}"')
        seen.add(key)


def list_map(key: str) -> dict[str, Any]:
    """Schema markers for a list keyed by `key`: server-side apply merges it by key, and rejects repeats."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}
