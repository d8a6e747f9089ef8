"""NCCL preflight: prove the gang's collective path before training starts.

Run as each pod's init container (`python -m dtjob_trainer.preflight`, the trainer's image and env, put
there by the operator when spec.nccl.preflight.enabled). Every rank joins the rendezvous with the job's
own backend (NCCL on GPUs, gloo on CPU) and times all-reduce over a few message sizes, as nccl-tests'
all_reduce_perf reports it: algbw = size / time, busbw = algbw * 2(n-1)/n. Each size's time is the
slowest rank's. Rank 0 judges the figure at the largest size against a floor, and the transport NCCL
chose (from its INFO log) against the one the network profile expects, and every rank exits with that
verdict, its figures in the termination message the operator reads:

    {"reason": "PreflightPassed", "message": "...", "busBandwidthGbps": 41.2, "algBandwidthGbps": 20.6,
     "sizeBytes": 67108864, "transport": "GPUDirectTCPX", "backend": "nccl", "worldSize": 2, "seconds": 3.1,
     "ncclEnv": "script"}

It starts as the trainer does (dtjob_trainer.nccl_env: the node's NCCL env script, else dtjob's fallback
values), and says which in `ncclEnv` (absent when the pod names no script); the verdict's message says
so when the fallback was used, so that the operator's Event does.

Knobs (set by the operator; GB/s are 10^9 bytes per second, as nccl-tests prints them):
DTJ_PREFLIGHT_SIZES (bytes, comma-separated), DTJ_PREFLIGHT_ITERATIONS, DTJ_PREFLIGHT_BUDGET_SECONDS
(the sweep stops before a size that would not fit), DTJ_PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS,
DTJ_PREFLIGHT_EXPECTED_TRANSPORT.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dtjob_trainer import nccl_env
from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.exit_codes import PREFLIGHT_FAILED

log = logging.getLogger(__name__)

DEFAULT_SIZES: Final = (1 << 20, 16 << 20, 64 << 20)
DEFAULT_ITERATIONS: Final = 5
DEFAULT_BUDGET_SECONDS: Final = 30.0
PASSED: Final = "PreflightPassed"
FAILED: Final = "PreflightFailed"
SOCKET: Final = "Socket"
# NCCL >= 2.12 logs "NCCL INFO Using network <name>"; older ones only "NET/<name> : Using ...".
_USING_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_NET_USING = re.compile(r"NCCL INFO NET/(\w+) ?: Using ")
NCCL_LOG_PATTERN: Final = "/tmp/dtj-preflight-nccl.%h.%p.log"


@dataclass(frozen=True)
class Measurement:
    size_bytes: int
    seconds: float
    """One all-reduce, averaged over the iterations: the slowest rank's."""
    world_size: int

    @property
    def alg_bandwidth_gbps(self) -> float:
        return self.size_bytes / self.seconds / 1e9

    @property
    def bus_bandwidth_gbps(self) -> float:
        """nccl-tests' busbw for all-reduce: what each link carried, comparable across gang sizes."""
        return self.alg_bandwidth_gbps * 2 * (self.world_size - 1) / self.world_size


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str


def transport_from_nccl_log(lines: Iterable[str]) -> str | None:
    """The network NCCL chose (Socket, IB, or a plugin's name such as GPUDirectTCPX, FasTrak, gIB)."""
    fallback = None
    for line in lines:
        if found := _USING_NETWORK.search(line):
            return found.group(1)
        if fallback is None and (found := _NET_USING.search(line)):
            fallback = found.group(1)
    return fallback


def judge(
    largest: Measurement, transport: str | None, min_bus_bandwidth_gbps: float | None, expected: str | None
) -> Verdict:
    figure = (
        f"all-reduce busbw {largest.bus_bandwidth_gbps:.2f} GB/s at {largest.size_bytes >> 20} MiB "
        f"over {largest.world_size} ranks, transport {transport or 'unknown'}"
    )
    if expected and transport == SOCKET:
        return Verdict(False, f"{figure}: NCCL fell back to TCP sockets where the profile expects {expected}")
    if min_bus_bandwidth_gbps is not None and largest.bus_bandwidth_gbps < min_bus_bandwidth_gbps:
        return Verdict(False, f"{figure}: below the floor of {min_bus_bandwidth_gbps:g} GB/s")
    return Verdict(True, figure)


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]
    iterations: int
    budget_seconds: float
    min_bus_bandwidth_gbps: float | None
    expected_transport: str | None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        sizes = environ.get("DTJ_PREFLIGHT_SIZES")
        floor = environ.get("DTJ_PREFLIGHT_MIN_BUS_BANDWIDTH_GBPS")
        return cls(
            sizes=tuple(int(s) for s in sizes.split(",")) if sizes else DEFAULT_SIZES,
            iterations=int(environ.get("DTJ_PREFLIGHT_ITERATIONS", DEFAULT_ITERATIONS)),
            budget_seconds=float(environ.get("DTJ_PREFLIGHT_BUDGET_SECONDS", DEFAULT_BUDGET_SECONDS)),
            min_bus_bandwidth_gbps=float(floor) if floor else None,
            expected_transport=environ.get("DTJ_PREFLIGHT_EXPECTED_TRANSPORT") or None,
        )


def sweep(settings: Settings) -> list[Measurement]:
    """Time all-reduce at each size on the default process group; every rank gets the same figures."""
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    world = dist.get_world_size()
    measurements: list[Measurement] = []
    started = time.monotonic()
    for size in sorted(settings.sizes):
        if measurements and _projected(measurements[-1], size, settings.iterations) > (
            settings.budget_seconds - (time.monotonic() - started)
        ):
            log.warning("preflight: skipping %d bytes and larger: they would not fit the budget", size)
            break
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device or "cpu")
        dist.all_reduce(tensor)  # warm-up: connections, buffers
        _synchronize(device)
        dist.barrier()
        begin = time.perf_counter()
        for _ in range(settings.iterations):
            dist.all_reduce(tensor)
        _synchronize(device)
        elapsed = torch.tensor([(time.perf_counter() - begin) / settings.iterations], device=device or "cpu")
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the gang runs at its slowest rank
        measurements.append(Measurement(size, float(elapsed.item()), world))
    return measurements


def _projected(last: Measurement, size: int, iterations: int) -> float:
    return last.seconds * size / last.size_bytes * (iterations + 1)


def _synchronize(device: object) -> None:
    if device is not None:
        import torch

        torch.cuda.synchronize()


def noting_the_fallback(verdict: Verdict, source: nccl_env.Source | None, script: str | None) -> Verdict:
    """The verdict, saying so when NCCL ran with dtjob's fallback values instead of the node's `script`."""
    if source != nccl_env.Source.FALLBACK:
        return verdict
    note = f"NCCL ran with dtjob's fallback values: {script} is absent or did not run on this node"
    return Verdict(verdict.passed, f"{verdict.message}; {note}")


def outcome(
    verdict: Verdict,
    largest: Measurement,
    transport: str | None,
    backend: str,
    seconds: float,
    source: nccl_env.Source | None = None,
) -> dict[str, object]:
    return {
        "reason": PASSED if verdict.passed else FAILED,
        "message": verdict.message,
        "busBandwidthGbps": round(largest.bus_bandwidth_gbps, 3),
        "algBandwidthGbps": round(largest.alg_bandwidth_gbps, 3),
        "sizeBytes": largest.size_bytes,
        "transport": transport,
        "backend": backend,
        "worldSize": largest.world_size,
        "seconds": round(seconds, 2),
        **({"ncclEnv": source.value} if source is not None else {}),
    }


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch
    import torch.distributed as dist

    from dtjob_trainer.pytorch.distributed import init_distributed

    environment = TrainerEnvironment.from_environ()
    settings = Settings.from_environ()
    started = time.monotonic()
    source = nccl_env.apply()  # as the trainer will (init_distributed would, too)
    if torch.cuda.is_available() and "NCCL_DEBUG_FILE" not in os.environ:
        # NCCL says which network it chose only at INFO: into a file of our own, not the pod's log.
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET", NCCL_DEBUG_FILE=NCCL_LOG_PATTERN)
    context = init_distributed(environment.torch, environment.rendezvous_timeout_s)
    measurements = sweep(settings)
    transport = _nccl_transport() if context.backend == "nccl" else "gloo"
    largest = measurements[-1]
    verdict = judge(largest, transport, settings.min_bus_bandwidth_gbps, settings.expected_transport)
    verdict = noting_the_fallback(verdict, source, os.environ.get(nccl_env.SCRIPT_VARIABLE))
    passed = torch.tensor([int(verdict.passed)], device=context.device)
    dist.broadcast(passed, src=0)  # rank 0's verdict is the gang's: every rank exits the same way
    if not bool(passed.item()) and verdict.passed:
        verdict = Verdict(False, f"rank 0 judged the gang below its floor; here: {verdict.message}")
    result = outcome(verdict, largest, transport, context.backend, time.monotonic() - started, source)
    for measured in measurements:
        log.info("preflight: %12d bytes  algbw %8.3f GB/s  busbw %8.3f GB/s", measured.size_bytes,
                 measured.alg_bandwidth_gbps, measured.bus_bandwidth_gbps)  # fmt: skip
    log.info("preflight %s: %s", result["reason"], verdict.message)
    environment.termination_message_path.write_text(json.dumps(result))
    dist.destroy_process_group()
    return 0 if verdict.passed else PREFLIGHT_FAILED


def _nccl_transport() -> str | None:
    lines: list[str] = []
    for path in Path("/tmp").glob("dtj-preflight-nccl.*.log"):
        lines += path.read_text(errors="replace").splitlines()
    return transport_from_nccl_log(lines)


if __name__ == "__main__":
    sys.exit(main())
