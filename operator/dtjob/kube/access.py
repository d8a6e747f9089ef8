"""This process's way to the apiserver: one gate (rate limit, fence), the reads and the writes through it."""

from __future__ import annotations

from dataclasses import dataclass

from dtjob.kube.gate import Gate
from dtjob.kube.reads import Reader
from dtjob.kube.writer import Writer


@dataclass(frozen=True)
class Kube:
    gate: Gate
    read: Reader
    write: Writer

    @classmethod
    def at(cls, qps: float, burst: int) -> Kube:
        """Requests at `qps` on average, `burst` at once; unfenced until the runtime fences it."""
        gate = Gate(qps, burst)
        return cls(gate, Reader(gate), Writer(gate))
