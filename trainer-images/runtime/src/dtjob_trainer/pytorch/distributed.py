"""Join the job's torch.distributed process group: NCCL when a GPU is visible, gloo otherwise."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TextIO

import torch
import torch.distributed as dist

from dtjob_trainer import nccl_env
from dtjob_trainer.environment import TorchRendezvous
from dtjob_trainer.reachability import Deadline, wait_until_accepting, wait_until_resolvable

log = logging.getLogger(__name__)

STORE_RETRY_SECONDS = 0.05
# How torch's TCPStore server says its port is taken.
PORT_IN_USE = "EADDRINUSE"


@dataclass(frozen=True)
class DistributedContext:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_rank_zero(self) -> bool:
        return self.rank == 0


def init_distributed(
    rendezvous: TorchRendezvous, rendezvous_timeout_s: float, attempt: int = 0
) -> DistributedContext:
    """Initialise the default process group, waiting up to `rendezvous_timeout_s` for rank 0.

    The ranks meet in rank 0's TCP store under a prefix of the attempt: a process still in an earlier
    attempt cannot take part in this one's rendezvous (under an in-place restart, rank 0's process serves
    a new store for each attempt it trains). Under torchrun, in its agent's store, as torch's own
    rendezvous does.

    Raises reachability.RendezvousTimeout when rank 0's name does not resolve or its port does not
    accept connections in time.
    """
    nccl_env.apply()  # the node's NCCL env script, before NCCL reads its variables
    if torch.cuda.is_available():
        backend, device = "nccl", torch.device("cuda", rendezvous.local_rank)
        torch.cuda.set_device(device)
    else:
        backend, device = "gloo", torch.device("cpu")
    if rendezvous.world_size == 1:
        # A single process has no one to meet: its store listens on any free loopback port.
        dist.init_process_group(backend, init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    else:
        host, port = rendezvous.master_addr, rendezvous.master_port
        deadline = Deadline.after(rendezvous_timeout_s)
        # Every rank, rank 0 included, connects to the store by this name.
        wait_until_resolvable(host, port, deadline)
        if rendezvous.rank != 0:
            wait_until_accepting(host, port, deadline)
        log.info(
            "joining %s process group at %s:%d as rank %d of %d",
            backend, host, port, rendezvous.rank, rendezvous.world_size,
        )  # fmt: skip
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True):
            # Under torchrun, its agent serves the store (a new one for each of its rounds): torch's own
            # rendezvous makes every rank a client of it.
            bracketed = f"[{host}]" if ":" in host else host  # an IPv6 literal
            dist.init_process_group(
                backend,
                init_method=f"tcp://{bracketed}:{port}",
                rank=rendezvous.rank,
                world_size=rendezvous.world_size,
            )
        else:
            dist.init_process_group(
                backend,
                store=dist.PrefixStore(attempt_prefix(attempt), attempt_store(rendezvous, attempt, deadline)),
                rank=rendezvous.rank,
                world_size=rendezvous.world_size,
            )
    return DistributedContext(
        rank=rendezvous.rank,
        world_size=rendezvous.world_size,
        local_rank=rendezvous.local_rank,
        backend=backend,
        device=device,
    )


def attempt_prefix(attempt: int) -> str:
    return f"dtjob/attempt/{attempt}"


def attempt_store(rendezvous: TorchRendezvous, attempt: int, deadline: Deadline) -> dist.TCPStore:
    """Rank 0's TCP store as served for `attempt`: rank 0 serves it and marks it as this attempt's; the
    other ranks connect and wait for the mark. Under an in-place restart a rank can reach rank 0's
    process while that is still in the last attempt, whose store it serves until its round ends: the
    mark never comes there, the store closes under the waiting rank, and it connects again (to the next
    store, once rank 0 serves it). Joining the process group only then keeps a failed join out of
    torch's group bookkeeping."""
    mark = f"{attempt_prefix(attempt)}/served"
    while True:
        try:
            store = dist.TCPStore(
                rendezvous.master_addr,
                rendezvous.master_port,
                rendezvous.world_size,
                is_master=rendezvous.rank == 0,
                timeout=timedelta(seconds=max(1.0, deadline.remaining())),
                wait_for_workers=False,
            )
            if rendezvous.rank == 0:
                store.set(mark, "1")
            else:
                store.wait([mark])
            return store
        except (dist.DistError, RuntimeError) as error:
            # Rank 0: the port is still held (by the last attempt's store, closing). The others: the
            # store they reached closed before it was this attempt's.
            if deadline.remaining() <= 0 or (rendezvous.rank == 0 and PORT_IN_USE not in str(error)):
                raise
            log.warning("no store of attempt %d at %s:%d yet (%s): trying again", attempt,
                        rendezvous.master_addr, rendezvous.master_port, str(error).splitlines()[0])  # fmt: skip
            if rendezvous.rank == 0:
                time.sleep(STORE_RETRY_SECONDS)
            else:
                # Rank 0 is between two stores, binding its next one in moments: TCPStore's own
                # connect retry backs off by up to a second against a refused port, this polls.
                wait_until_accepting(
                    rendezvous.master_addr, rendezvous.master_port, deadline, STORE_RETRY_SECONDS
                )


@contextmanager
def distributed(
    rendezvous: TorchRendezvous,
    rendezvous_timeout_s: float,
    crash_log: Path | None = None,
    attempt: int = 0,
) -> Iterator[DistributedContext]:
    """init_distributed, and destroy the process group on the way out (also on SystemExit).

    On a normal exit the ranks first meet at a barrier: a rank that tears its process group down while a
    peer still talks to it can abort in gloo's worker threads ("terminate called without an active
    exception", SIGABRT) after its work is done. Not on an exception: a lost peer would never arrive.

    A native crash (gloo's or NCCL's threads abort the process, a segfault) writes every thread's Python
    stack to `crash_log`, the container's termination message file (its kubelet keeps the file's head,
    where the stacks are; the log's tail would hold Python's list of extension modules instead), or to
    stderr without one."""
    with contextlib.suppress(AttributeError, ValueError, OSError):  # a stderr with no file descriptor
        faulthandler.enable(_crash_stream(crash_log), all_threads=True)
    context = init_distributed(rendezvous, rendezvous_timeout_s, attempt)
    try:
        yield context
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _crash_stream(crash_log: Path | None) -> TextIO:
    if crash_log is not None and crash_log.parent.is_dir():
        with contextlib.suppress(OSError):
            # Kept open for the process's life: faulthandler writes to its descriptor when it crashes.
            return crash_log.open("a")
    return sys.stderr
