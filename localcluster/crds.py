"""Waiting until CustomResourceDefinitions are served. `kubectl wait --for=condition=Established` fails at
once on a CRD whose status has no conditions yet (one just created: ".status.conditions accessor error"),
so the conditions are read until they say so, with a deadline."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

Kubectl = Callable[..., str]


def wait_established(kubectl: Kubectl, names: Sequence[str], timeout: float = 60.0) -> None:
    """`names`: CRD names (`crd/` prefixes allowed); `kubectl(*args, check=False)` returns its stdout."""
    wanted = {name.removeprefix("crd/") for name in names}
    deadline = time.monotonic() + timeout
    while True:
        try:
            listed = json.loads(kubectl("get", "crd", *sorted(wanted), "-o", "json", check=False) or "{}")
        except ValueError:
            listed = {}
        items = listed.get("items", [listed] if listed.get("kind") == "CustomResourceDefinition" else [])
        served = {
            crd["metadata"]["name"]
            for crd in items
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (crd.get("status") or {}).get("conditions") or [])
        }  # fmt: skip
        if wanted <= served:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"CRDs not Established after {timeout:.0f}s: {', '.join(sorted(wanted - served))}"
            )
        time.sleep(0.2)
