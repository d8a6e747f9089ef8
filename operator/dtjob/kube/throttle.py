"""A client-side rate limit for the operator's API calls: a token bucket shared by every pass.

Like client-go's default limiter (QPS and burst): a burst of calls goes out at once, then calls are spaced
at `qps`, so a thousand jobs waking together (after an apiserver outage, say) queue here instead of
flooding the apiserver.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"qps must be > 0 and burst >= 1 (got qps={qps}, burst={burst})")
        self.qps, self.burst, self._clock = qps, burst, clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token; the seconds to wait before using it (0 when one was at hand)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_take(self) -> bool:
        """Take one token if one is at hand now; False (nothing taken) otherwise."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def take(self) -> None:
        """Block the calling (worker) thread until a call may go out."""
        if (delay := self.reserve()) > 0:
            time.sleep(delay)
