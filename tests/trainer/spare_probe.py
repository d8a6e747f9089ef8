"""A hot spare's trainer, waiting for a rank, for the SIGTERM test (test_rounds.py).

`python -m tests.trainer.spare_probe ATTEMPT_FILE`: train_in_rounds with ATTEMPT_FILE empty (a spare);
the training function is never reached unless the file names an attempt.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path

from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.pytorch.rounds import train_in_rounds

if __name__ == "__main__":
    logging.basicConfig(stream=sys.stdout, format="%(message)s")
    environment = replace(TrainerEnvironment.from_environ({}), attempt_file=Path(sys.argv[1]))
    train_in_rounds(environment, lambda context, env: sys.exit("a spare trained without a rank"))
