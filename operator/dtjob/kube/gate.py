"""The gate every API request of this process passes: one client-side rate limit (a token bucket shared
by every pass), and for a write, then, the fence: with leader election, whether this replica still holds
the Lease (the wait for a token may have been long)."""

from __future__ import annotations

from collections.abc import Callable

from dtjob.kube.throttle import TokenBucket

# Every write of the operator is made under this field manager (server-side applies, Events' source).
FIELD_MANAGER = "dtjob-operator"


def unfenced() -> bool:
    return True


class Deposed(Exception):
    """This replica lost the Lease during a pass: nothing more of the pass is written."""


class Gate:
    def __init__(self, qps: float, burst: int, fence: Callable[[], bool] = unfenced) -> None:
        self.bucket = TokenBucket(qps, burst)
        self.fence = fence
        """Whether this process may still write; the runtime sets it as its leadership changes."""

    def read(self) -> None:
        self.bucket.take()

    def write(self) -> None:
        self.bucket.take()
        if not self.fence():
            raise Deposed
