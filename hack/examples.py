"""What running an example from examples/ on the local cluster needs beyond `kubectl apply`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def fresh_checkpoint_dir(manifest: dict[str, Any]) -> Path:
    """The example's hostPath checkpoint directory, emptied (a leftover checkpoint would make the job
    resume instead of train) and writable for the trainer's non-root user. The real node is this machine."""
    path = Path(manifest["spec"]["checkpoint"]["volume"]["hostPath"]["path"])
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o1777)
    return path
