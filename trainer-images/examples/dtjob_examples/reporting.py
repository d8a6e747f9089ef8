"""How the examples report: the runtime's log lines, and one JSON result line at the end."""

from __future__ import annotations

import json
import logging


def configure_logging() -> None:
    """Show the runtime's INFO lines on stderr, once: TensorFlow's absl puts a handler on the root
    logger, and a root handler of ours would print TensorFlow's lines twice."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    runtime = logging.getLogger("dtjob_trainer")
    runtime.addHandler(handler)
    runtime.setLevel(logging.INFO)
    runtime.propagate = False


def print_result(**fields: object) -> None:
    """One JSON line with the outcome, for people and for tests to read from the log."""
    print(json.dumps({"event": "result", **fields}), flush=True)
