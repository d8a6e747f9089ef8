"""How a trainer process ends, for tests/trainer/test_process_end.py.

`python -m tests.trainer.process_end_probe end MARKER`: prints and logs without flushing, registers an
atexit handler that would write MARKER, then ends with end_process(3).
`python -m tests.trainer.process_end_probe crash CRASH_LOG`: joins a one-process gloo group through
`distributed(..., crash_log=CRASH_LOG)` and crashes natively (SIGSEGV) inside a function named
`training_step`.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from pathlib import Path

from dtjob_trainer.environment import TorchRendezvous
from dtjob_trainer.process_end import end_process
from dtjob_trainer.pytorch.distributed import distributed


def end(marker: Path) -> None:
    atexit.register(marker.write_text, "the interpreter's teardown ran")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    logging.getLogger("probe").info("logged before the end")
    sys.stdout.write("printed before the end")  # no newline, no flush: only end_process's flush shows it
    end_process(3)


def training_step() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def crash(crash_log: Path) -> None:
    alone = TorchRendezvous(master_addr="127.0.0.1", master_port=0, world_size=1, rank=0, local_rank=0)
    with distributed(alone, rendezvous_timeout_s=30, crash_log=crash_log):
        training_step()


if __name__ == "__main__":
    {"end": end, "crash": crash}[sys.argv[1]](Path(sys.argv[2]))
