"""The on-disk layout of checkpoints: a `latest` pointer written last, and retention.

    <root>/step-000000120/   a checkpoint; published once `latest` has named it (its files are the
                             framework's business)
    <root>/step-000000140/   newer than the step `latest` names: being written, or left by a killed
                             writer; never read, and discarded before that step is written again
    <root>/latest            text file naming the newest published checkpoint: the only truth

Publishing step N: `begin` makes an empty `step-N/` (discarding what a killed writer left there), the
framework writes its files into it, then `publish` fsyncs them and replaces `latest` (a temp file and
a file rename) to name `step-N`, then applies retention. A reader loads only the step `latest` names,
so a writer killed at any point leaves `latest` naming a complete checkpoint (or no `latest` at all).
Saving again the step `latest` names first points `latest` back at the newest older checkpoint kept
(or removes it), so `latest` never names a directory being rewritten.

Why no directory is ever renamed: checkpoints often live on a Cloud Storage FUSE volume (GKE CSI
driver gcsfuse.csi.storage.gke.io). On a bucket with a flat namespace, gcsfuse renames a directory by
copying every object under it and then deleting the originals -- not atomic, and a killed rename leaves
both halves -- and it refuses directory renames outright unless the mount sets `rename-dir-limit`
(default 0). Only buckets with a hierarchical namespace rename folders atomically. Replacing a single
file is one object write, which Cloud Storage makes atomic, and on POSIX filesystems (local disk,
Persistent Disk, Filestore/NFS) a file rename is atomic as well; so the pointer is the one thing that
changes atomically. The previous layout staged into `.step-N.partial/` and renamed it into place;
such directories are still discarded (`discard_partials`).

Who calls what: one process per root writes (rank 0), one checkpoint at a time; in sharded saves other
ranks write files into `step-N/` only between rank 0's `begin(N)` and `publish(N)`. Hence a step
directory newer than `latest` is a leftover whenever rank 0 is not inside a save: at start-up
(`discard_partials`), in `begin` (the step it is about to write), and after `latest` moves in `publish`
(retention). Retention never deletes the step `latest` names.

Framework-free so the layout is tested without torch.
"""

# Cloud Storage FUSE semantics read for this: https://github.com/GoogleCloudPlatform/gcsfuse/blob/master/docs/semantics.md
# (folder rename is atomic only on hierarchical-namespace buckets) and gcsfuse's `--rename-dir-limit` flag
# ("Allow rename a directory containing fewer descendants than this limit", default 0).

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

LATEST_POINTER = "latest"
_ENTRY = re.compile(r"^step-(\d{9})$")


def write_text_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` so readers see the old content or the new one, never a mix.

    A file rename: atomic on POSIX filesystems, and one object written on Cloud Storage FUSE.
    """
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(staging, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(staging, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make entries created, renamed or removed inside `directory` durable (they are its metadata)."""
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
        """Where the files of `step` are written between `begin` and `publish`: its own directory
        (nothing is renamed into place; see the module docstring)."""
        return self.path_for(step)

    def latest_step(self) -> int | None:
        """The step `latest` names, if that checkpoint is present: the only one a reader may load."""
        pointed = self._pointed_step()
        if pointed is None or pointed < 0 or not self.path_for(pointed).is_dir():
            return None
        return pointed

    def step_directories(self) -> list[int]:
        """Every `step-N` directory, published or not, oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _ENTRY.match(p.name)))

    def published_steps(self) -> list[int]:
        """Checkpoints that were published: the step `latest` names and the older ones retained."""
        latest = self.latest_step()
        if latest is None:
            return []
        return [step for step in self.step_directories() if step <= latest]

    def begin(self, step: int) -> Path:
        """An empty directory for the checkpoint of `step` (a killed writer's leftover is discarded)."""
        if step == self._pointed_step():  # saved again: `latest` must not name it while it is rewritten
            self._step_pointer_back_from(step)
        final = self.path_for(step)
        shutil.rmtree(final, ignore_errors=True)
        final.mkdir(parents=True)  # FileExistsError if the leftover could not be removed: never mix writes
        return final

    def publish(self, step: int) -> Path:
        """Make the checkpoint of `step` durable, point `latest` at it, drop the oldest."""
        final = self.path_for(step)
        if not final.is_dir():
            raise FileNotFoundError(f"{final} does not exist: begin({step}) first")
        fsync_tree(final)
        fsync_directory(self.root)  # the step directory's own entry, before anything can name it
        write_text_atomically(self.root / LATEST_POINTER, self.entry_name(step) + "\n")
        self._prune(latest=step)
        return final

    def discard_partials(self) -> None:
        """Remove what killed writers left: step directories newer than the step `latest` names, the
        previous layout's `.step-N.partial` directories and `latest`'s temp files.

        Only while no save is in progress on this root (rank 0 calls it at start-up, before saving)."""
        if not self.root.is_dir():
            return
        for step in self._leftover_steps():
            shutil.rmtree(self.path_for(step), ignore_errors=True)
        for path in self.root.glob(".step-*.partial"):
            shutil.rmtree(path, ignore_errors=True)
        for path in self.root.glob(f".{LATEST_POINTER}.tmp-*"):
            path.unlink(missing_ok=True)

    def _pointed_step(self) -> int | None:
        """The step `latest` names, present or not; -1 without a `latest`; None if it is unreadable."""
        try:
            name = (self.root / LATEST_POINTER).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return -1
        match = _ENTRY.match(name)
        return int(match.group(1)) if match is not None else None

    def _leftover_steps(self) -> list[int]:
        """Step directories newer than the step `latest` names (all of them without a `latest`).

        With an unreadable `latest` nothing is a leftover: nothing is deleted on a guess."""
        pointed = self._pointed_step()
        if pointed is None:
            return []
        return [step for step in self.step_directories() if step > pointed]

    def _step_pointer_back_from(self, step: int) -> None:
        """Before `step`, which `latest` names, is rewritten: point `latest` at the newest older
        checkpoint that retention keeps, or remove it when there is none. (The manager never saves a
        step twice in one process; this covers a script that saves the step it started at without
        restoring. The old layout had a window here where `latest` named a removed directory.)"""
        kept = self.published_steps()[-self.keep_last :]
        older = [kept_step for kept_step in kept if kept_step < step]
        pointer = self.root / LATEST_POINTER
        if older:
            write_text_atomically(pointer, self.entry_name(older[-1]) + "\n")
        else:
            pointer.unlink(missing_ok=True)
            fsync_directory(self.root)

    def _prune(self, latest: int) -> None:
        """Retention, right after `latest` was pointed at step `latest`: keep the newest `keep_last`
        published checkpoints (`latest` among them); drop older ones and the leftovers newer than it
        (the only writer is inside this publish, so nothing newer is being filled)."""
        steps = self.step_directories()
        published = [step for step in steps if step <= latest]
        doomed = published[: max(0, len(published) - self.keep_last)] + [s for s in steps if s > latest]
        for step in doomed:
            if step != latest:
                shutil.rmtree(self.path_for(step), ignore_errors=True)
