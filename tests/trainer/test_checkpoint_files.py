"""The checkpoint directory: what `latest` names is always complete, no directory is ever renamed
(Cloud Storage FUSE cannot rename one atomically), leftovers are discarded, old checkpoints pruned."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dtjob_trainer import checkpoint_files
from dtjob_trainer.checkpoint_files import LATEST_POINTER, CheckpointDirectory, write_text_atomically


def save(directory: CheckpointDirectory, step: int, content: str | None = None) -> Path:
    (directory.begin(step) / "state").write_text(content or f"step {step}")
    return directory.publish(step)


def loaded(root: Path) -> tuple[int, str] | None:
    """What a reader restores from `root`: the step `latest` names and its state, or None."""
    step = CheckpointDirectory(root, keep_last=1).latest_step()
    if step is None:
        return None
    state = root / CheckpointDirectory.entry_name(step) / "state"
    return step, state.read_text() if state.exists() else "INCOMPLETE"


def names(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir())


def record_after_each_change(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[tuple[int, str] | None]:
    """What a reader would load, observed after every rename, removal and fsync on the filesystem."""
    seen = [loaded(root)]

    def observing(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            view = loaded(root)
            if seen[-1] != view:
                seen.append(view)
            return result

        return call

    for name in ("replace", "rename", "unlink", "rmdir", "fsync"):
        monkeypatch.setattr(os, name, observing(getattr(os, name)))
    monkeypatch.setattr(shutil, "rmtree", observing(shutil.rmtree))
    return seen


def test_an_empty_directory_has_no_latest_checkpoint(tmp_path: Path) -> None:
    assert CheckpointDirectory(tmp_path / "missing", keep_last=2).latest_step() is None


def test_publishing_writes_the_checkpoint_in_place_and_points_latest_at_it(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    published = save(directory, 40)
    assert published == tmp_path / "step-000000040"
    assert (published / "state").read_text() == "step 40"
    assert (tmp_path / LATEST_POINTER).read_text() == "step-000000040\n"
    assert directory.latest_step() == 40
    assert names(tmp_path) == [LATEST_POINTER, "step-000000040"]


def test_publishing_never_renames_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a flat Cloud Storage bucket gcsfuse renames a directory by copying and deleting every object,
    and refuses to unless the mount sets rename-dir-limit: refuse it here the same way."""
    renamed: list[str] = []

    def refusing_directories(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            if os.path.isdir(src):
                raise OSError(f"directory rename refused: {src}")
            renamed.append(os.path.basename(dst))
            return original(src, dst, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "replace", refusing_directories(os.replace))
    monkeypatch.setattr(os, "rename", refusing_directories(os.rename))
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    for step in (20, 40, 40, 60):
        save(directory, step)
    assert loaded(tmp_path) == (60, "step 60")
    assert set(renamed) == {LATEST_POINTER}  # the pointer is the only thing that is ever replaced


def test_a_reader_sees_the_previous_checkpoint_until_the_new_one_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    save(directory, 40)
    seen = record_after_each_change(monkeypatch, tmp_path)
    staging = directory.begin(60)
    (staging / "state").write_text("step 60")
    (staging / "shard").write_text("x")
    directory.publish(60)
    assert seen == [(40, "step 40"), (60, "step 60")]


@pytest.mark.parametrize(
    ("earlier", "expected"),
    [
        pytest.param((20, 40), [(40, "step 40"), (20, "step 20"), (40, "step 40 again")], id="latest falls back to the one before"),
        pytest.param((40,), [(40, "step 40"), None, (40, "step 40 again")], id="the only checkpoint: none while rewritten"),
    ],
)  # fmt: skip
def test_saving_the_step_latest_names_again_never_exposes_it_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, earlier: tuple[int, ...], expected: list[Any]
) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    for step in earlier:
        save(directory, step)
    seen = record_after_each_change(monkeypatch, tmp_path)
    save(directory, 40, "step 40 again")
    assert seen == expected
    assert directory.published_steps() == list(earlier)


def test_every_file_is_fsynced_before_latest_names_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        events.append(("replace", str(dst)))
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    staging = directory.begin(60)
    (staging / "trainer.pt").write_text("state")
    (staging / "shards").mkdir()
    (staging / "shards" / "rank-1").write_text("shard")
    directory.publish(60)

    pointer_replaced = events.index(("replace", str(tmp_path / LATEST_POINTER)))
    synced_before = {path for kind, path in events[:pointer_replaced] if kind == "fsync"}
    for path in (
        staging / "trainer.pt",
        staging / "shards" / "rank-1",
        staging / "shards",
        staging,
        tmp_path,
    ):
        assert str(path.resolve()) in synced_before, path


def test_a_writer_killed_before_latest_leaves_the_previous_checkpoint_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    save(directory, 40)
    (directory.begin(60) / "state").write_text("step 60")

    class Killed(BaseException):
        pass

    def killed(path: Path, text: str) -> None:
        raise Killed

    monkeypatch.setattr(checkpoint_files, "write_text_atomically", killed)
    with pytest.raises(Killed):
        directory.publish(60)

    assert loaded(tmp_path) == (40, "step 40")
    assert directory.published_steps() == [40]
    CheckpointDirectory(tmp_path, keep_last=2).discard_partials()  # the next start
    assert names(tmp_path) == [LATEST_POINTER, "step-000000040"]


def test_a_checkpoint_still_being_written_is_never_the_latest(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    save(directory, 40)
    (directory.begin(60) / "state").write_text("half written")
    assert directory.latest_step() == 40
    assert directory.published_steps() == [40]
    assert directory.step_directories() == [40, 60]


def test_files_other_ranks_write_between_begin_and_publish_are_in_the_checkpoint(tmp_path: Path) -> None:
    """Sharded saves: rank 0 begins, every rank writes into staging_path, rank 0 publishes."""
    rank_zero = CheckpointDirectory(tmp_path, keep_last=2)
    rank_zero.begin(60)
    for rank in range(3):
        (CheckpointDirectory(tmp_path, keep_last=2).staging_path(60) / f"__{rank}_0.distcp").write_text("s")
    (rank_zero.staging_path(60) / "trainer.pt").write_text("state")
    published = rank_zero.publish(60)
    assert names(published) == ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "trainer.pt"]
    assert rank_zero.latest_step() == 60


def test_a_leftover_newer_than_latest_is_discarded_at_start(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    save(directory, 20)
    (directory.begin(40) / "state").write_text("half written")
    (tmp_path / "step-000000060").mkdir()
    CheckpointDirectory(tmp_path, keep_last=2).discard_partials()
    assert names(tmp_path) == [LATEST_POINTER, "step-000000020"]


def test_without_latest_every_step_directory_is_a_leftover(tmp_path: Path) -> None:
    (tmp_path / "step-000000020").mkdir()
    CheckpointDirectory(tmp_path, keep_last=2).discard_partials()
    assert names(tmp_path) == []


def test_an_unreadable_latest_discards_nothing(tmp_path: Path) -> None:
    (tmp_path / "step-000000020").mkdir()
    (tmp_path / LATEST_POINTER).write_text("garbage\n")
    CheckpointDirectory(tmp_path, keep_last=2).discard_partials()
    assert names(tmp_path) == [LATEST_POINTER, "step-000000020"]


def test_a_leftover_is_cleared_before_its_step_is_written_again(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    save(directory, 20)
    leftover = directory.begin(40)
    (leftover / "__7_0.distcp").write_text("a shard of a larger gang")
    assert names(directory.begin(40)) == []
    (directory.staging_path(40) / "state").write_text("step 40")
    assert names(directory.publish(40)) == ["state"]


def test_retention_keeps_the_newest_published_and_drops_leftovers(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    for step in (20, 40, 60, 80):
        save(directory, step)
    assert directory.published_steps() == [60, 80]
    (directory.begin(120) / "state").write_text("killed writer's leftover")
    save(directory, 100)
    # the leftover does not count towards keep_last (80 stays) and is removed
    assert names(tmp_path) == [LATEST_POINTER, "step-000000080", "step-000000100"]
    assert directory.latest_step() == 100


def test_retention_never_deletes_the_step_latest_names(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=1)
    save(directory, 80)
    save(directory, 20)  # a run that started over without restoring: `latest` is what counts
    assert names(tmp_path) == [LATEST_POINTER, "step-000000020"]
    assert loaded(tmp_path) == (20, "step 20")


def test_the_previous_layout_is_read_and_its_partials_and_temp_files_discarded(tmp_path: Path) -> None:
    (tmp_path / "step-000000020").mkdir()
    (tmp_path / "step-000000020" / "state").write_text("step 20")
    (tmp_path / ".step-000000040.partial").mkdir()
    (tmp_path / ".step-000000040.partial" / "state").write_text("half written")
    write_text_atomically(tmp_path / LATEST_POINTER, "step-000000020\n")
    (tmp_path / f".{LATEST_POINTER}.tmp-4242").write_text("step-0000")  # killed inside the pointer write

    directory = CheckpointDirectory(tmp_path, keep_last=2)
    assert loaded(tmp_path) == (20, "step 20")
    directory.discard_partials()
    assert names(tmp_path) == [LATEST_POINTER, "step-000000020"]
    save(directory, 40)
    assert directory.published_steps() == [20, 40]


def test_publishing_a_step_that_was_not_begun_is_refused(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    save(directory, 20)
    with pytest.raises(FileNotFoundError, match="begin"):
        directory.publish(40)
    assert loaded(tmp_path) == (20, "step 20")


def test_a_pointer_to_a_missing_checkpoint_counts_as_none(tmp_path: Path) -> None:
    write_text_atomically(tmp_path / LATEST_POINTER, "step-000000020\n")
    assert CheckpointDirectory(tmp_path, keep_last=2).latest_step() is None


def test_keeping_no_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointDirectory(tmp_path, keep_last=0)
