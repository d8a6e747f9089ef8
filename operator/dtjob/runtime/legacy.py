"""The finalizer that versions before the uninstall fix put on jobs (Kopf's, for its daemon): removed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# The finalizer that versions before the uninstall fix put on jobs (Kopf's, for its daemon): removed.
LEGACY_FINALIZER: Final = "training.dtjob.io/finalizer"


def legacy(job: Mapping[str, Any]) -> bool:
    return LEGACY_FINALIZER in (job["metadata"].get("finalizers") or [])
