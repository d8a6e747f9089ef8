"""Free local ports for the servers tests start (operators' health and intake endpoints, local gangs)."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def _ephemeral_ports() -> range:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return range(int(low), int(high) + 1)


_handed_out: set[int] = set()


def free_port() -> int:
    """A free port below the kernel's ephemeral range, never handed out before in this run.

    Not `bind(("127.0.0.1", 0))`: that port is in the range outgoing connections take their source
    port from, so a gRPC or gloo client retrying a peer that is not listening yet can end up connected
    to itself on the peer's port (TCP self-connect) or hold it when the peer binds.
    """
    below = range(20000, _ephemeral_ports().start)
    for port in random.sample(below, len(below)):
        if port in _handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))  # wildcard: free on every address
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise AssertionError(f"no free port in {below}")
