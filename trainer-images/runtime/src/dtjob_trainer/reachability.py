"""Wait, with a deadline, until rank 0's DNS name resolves and its rendezvous port accepts connections.

torch's TCPStore treats a failed hostname lookup as fatal (pytorch#73682) and a headless Service's DNS
record can lag the pod by tens of seconds, so a worker that starts before rank 0 would crash. Retrying
here turns that race into a short wait, and a real outage into one clear error at the deadline.
"""

from __future__ import annotations

import itertools
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

_FIRST_RETRY_DELAY_S = 0.05
_MAX_RETRY_DELAY_S = 2.0
# A refused connection costs rank 0 nothing (the kernel answers it), and rank 0 listens within moments of
# its start: polling its port often keeps a worker from sleeping past it, as a long backoff would.
_MAX_CONNECT_RETRY_DELAY_S = 0.25


class RendezvousTimeout(RuntimeError):
    """Rank 0 was not reachable before the deadline."""


@dataclass(frozen=True)
class Deadline:
    at: float  # time.monotonic() value
    total_s: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(at=time.monotonic() + seconds, total_s=seconds)

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())


def wait_until_resolvable(host: str, port: int, deadline: Deadline) -> None:
    """Return once `host` resolves (rank 0 needs only this: it is the one that will listen)."""
    _retry(lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM), host, port, deadline, "resolve")


def wait_until_accepting(
    host: str, port: int, deadline: Deadline, max_retry_delay_s: float = _MAX_CONNECT_RETRY_DELAY_S
) -> None:
    """Return once a TCP connection to host:port succeeds (the connection is closed straight away)."""

    def connect() -> None:
        with socket.create_connection((host, port), timeout=max(0.1, min(2.0, deadline.remaining()))):
            pass

    _retry(connect, host, port, deadline, "connect to", max_retry_delay_s)


def _retry(
    attempt: Callable[[], object],
    host: str,
    port: int,
    deadline: Deadline,
    verb: str,
    max_retry_delay_s: float = _MAX_RETRY_DELAY_S,
) -> None:
    delay = min(_FIRST_RETRY_DELAY_S, max_retry_delay_s)
    for attempts in itertools.count(1):
        try:
            attempt()
            return
        except OSError as err:
            if attempts == 1:
                log.info("waiting for rank 0 at %s:%d (%s)", host, port, err)
            if deadline.remaining() <= 0:
                raise RendezvousTimeout(
                    f"could not {verb} rank 0 at {host}:{port} within {deadline.total_s:g}s "
                    f"after {attempts} attempts (last error: {err}); check that the rank-0 pod is running "
                    f"and that its headless Service publishes not-ready addresses "
                    f"(DTJ_RENDEZVOUS_TIMEOUT_SECONDS sets this wait)"
                ) from err
        time.sleep(min(delay, deadline.remaining()))
        delay = min(delay * 2, max_retry_delay_s)
