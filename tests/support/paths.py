"""Where the repository's files are, for tests and benches."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "training.dtjob.io_distributedtrainingjobs.yaml"
