"""A process stuck where SIGTERM finds it (as in a collective whose peer is gone), for the watchdog tests.

`python -m tests.trainer.termination_probe BUDGET_S MESSAGE_PATH [--saved-step N]`: installs the
runtime's SIGTERM handling, says "ready", and never returns by itself. With --saved-step it records that
checkpoint as saved once SIGTERM arrives, then stays stuck (a slow teardown).
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from dtjob_trainer.termination import TerminationSignal


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("budget_s", type=float)
    parser.add_argument("message_path", type=Path)
    parser.add_argument("--saved-step", type=int)
    args = parser.parse_args()
    with TerminationSignal(args.budget_s, args.message_path) as termination:
        print("ready", flush=True)
        while not termination.requested:
            signal.pause()
        if args.saved_step is not None:
            termination.checkpoint_saved(args.saved_step)
        while True:
            signal.pause()


if __name__ == "__main__":
    main()
