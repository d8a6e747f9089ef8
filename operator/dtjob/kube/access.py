"""This process's way to the apiserver: one gate (rate limit, fence), the reads and the writes through it."""

from __future__ import annotations

from dataclasses import dataclass

from dtjob.kube.fault import FaultHook
from dtjob.kube.gate import Gate
from dtjob.kube.reads import Reader
from dtjob.kube.writer import Writer


@dataclass(frozen=True)
class Kube:
    gate: Gate
    read: Reader
    write: Writer

    @classmethod
    def at(cls, qps: float, burst: int, fault: FaultHook | None = None) -> Kube:
        """Requests at `qps` on average, `burst` at once; unfenced until the runtime fences it. `fault`: the
        tests' fault hook (kube/fault.py), inert by default."""
        gate = Gate(qps, burst, fault=fault or FaultHook())
        return cls(gate, Reader(gate), Writer(gate))
