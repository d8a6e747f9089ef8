"""The gate every API request of this process passes: one client-side rate limit (a token bucket shared
by every pass), and for a write, then, the fence: with leader election, how long this replica may still
write (the wait for a token may have been long). A write carries what is left of that as its deadline,
to the apiserver too (kube/client.py), so that a slow write cannot land after a standby could have taken
the Lease: it lands inside the lease it was started under, or not at all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dtjob.kube.fault import FaultHook
from dtjob.kube.throttle import TokenBucket

# Every write of the operator is made under this field manager (server-side applies, Events' source).
FIELD_MANAGER = "dtjob-operator"

Fence = Callable[[], float | None]
"""Seconds this process may still write in; None: no limit (no leader election); 0 or less: none."""


def unfenced() -> float | None:
    return None


class Deposed(Exception):
    """This replica lost the Lease during a pass: nothing more of the pass is written."""


class Gate:
    def __init__(
        self, qps: float, burst: int, fence: Fence = unfenced, fault: FaultHook | None = None
    ) -> None:
        self.bucket = TokenBucket(qps, burst)
        self.fence = fence
        """How long this process may still write; the runtime sets it as its leadership changes."""
        self.fault = fault or FaultHook()
        """The tests' fault hook (kube/fault.py): inert unless its environment variable names an action."""

    def read(self) -> None:
        self.bucket.take()

    def write(self) -> dict[str, Any]:
        """Wait for a token; then Deposed, or the keyword arguments of the client's call that give the write
        the seconds it has left to land in, client and apiserver side (none without leader election)."""
        self.fault.before_write()
        self.bucket.take()
        left = self.fence()
        if left is None:
            return {}
        if left <= 0:
            raise Deposed
        return {"_request_timeout": left}
