"""The on-disk layout of checkpoints: atomic publication, a `latest` pointer, and retention.

    <root>/step-000000120/          one published checkpoint (its files are the framework's business)
    <root>/.step-000000140.partial/ being written; never read
    <root>/latest                   text file naming the newest published checkpoint

A checkpoint is written into its `.partial` directory, then renamed into place, then `latest` is
replaced atomically. A writer killed at any point therefore leaves `latest` naming a complete
checkpoint (or no `latest` at all). Framework-free so the layout is tested without torch.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

LATEST_POINTER = "latest"
_ENTRY = re.compile(r"^step-(\d{9})$")


def write_text_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` so readers see the old content or the new one, never a mix."""
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(staging, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(staging, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make renames inside `directory` durable (a rename is metadata of the directory)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(directory: Path) -> None:
    """Flush every file under `directory`, then the directories themselves."""
    for parent, _, files in os.walk(directory):
        for name in files:
            fd = os.open(Path(parent, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(Path(parent))


class CheckpointDirectory:
    def __init__(self, root: Path, keep_last: int) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be at least 1, got {keep_last}")
        self.root = root
        self.keep_last = keep_last

    @staticmethod
    def entry_name(step: int) -> str:
        return f"step-{step:09d}"

    def path_for(self, step: int) -> Path:
        return self.root / self.entry_name(step)

    def staging_path(self, step: int) -> Path:
        return self.root / f".{self.entry_name(step)}.partial"

    def latest_step(self) -> int | None:
        """The step `latest` names, if that checkpoint is present."""
        try:
            name = (self.root / LATEST_POINTER).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        match = _ENTRY.match(name)
        if match is None or not (self.root / name).is_dir():
            return None
        return int(match.group(1))

    def published_steps(self) -> list[int]:
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _ENTRY.match(p.name)))

    def begin(self, step: int) -> Path:
        """An empty staging directory for `step` (a leftover from a killed writer is discarded)."""
        staging = self.staging_path(step)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def publish(self, step: int) -> Path:
        """Make the staged checkpoint of `step` durable, point `latest` at it, drop the oldest."""
        staging, final = self.staging_path(step), self.path_for(step)
        fsync_tree(staging)
        if final.exists():  # the same step saved again (e.g. a preemption save right after a periodic one)
            shutil.rmtree(final)
        os.replace(staging, final)
        fsync_directory(self.root)
        write_text_atomically(self.root / LATEST_POINTER, self.entry_name(step) + "\n")
        self._prune(keep=step)
        return final

    def discard_partials(self) -> None:
        """Remove staging directories left by writers that were killed."""
        if self.root.is_dir():
            for path in self.root.glob(".step-*.partial"):
                shutil.rmtree(path, ignore_errors=True)

    def _prune(self, keep: int) -> None:
        steps = self.published_steps()
        for step in steps[: max(0, len(steps) - self.keep_last)]:
            if step != keep:
                shutil.rmtree(self.path_for(step), ignore_errors=True)
