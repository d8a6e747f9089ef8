"""The checkpoint directory: what `latest` names is always complete; old checkpoints are pruned."""

from __future__ import annotations

from pathlib import Path

import pytest
from dtjob_trainer.checkpoint_files import LATEST_POINTER, CheckpointDirectory, write_text_atomically


def save(directory: CheckpointDirectory, step: int) -> Path:
    (directory.begin(step) / "state").write_text(f"step {step}")
    return directory.publish(step)


def test_an_empty_directory_has_no_latest_checkpoint(tmp_path: Path) -> None:
    assert CheckpointDirectory(tmp_path / "missing", keep_last=2).latest_step() is None


def test_publishing_moves_the_staged_checkpoint_into_place_and_points_latest_at_it(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    published = save(directory, 40)
    assert published == tmp_path / "step-000000040"
    assert (published / "state").read_text() == "step 40"
    assert (tmp_path / LATEST_POINTER).read_text() == "step-000000040\n"
    assert directory.latest_step() == 40
    assert not directory.staging_path(40).exists()


def test_a_checkpoint_still_being_written_is_never_the_latest(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    save(directory, 40)
    (directory.begin(60) / "state").write_text("half written")
    assert directory.latest_step() == 40
    assert directory.published_steps() == [40]


def test_only_the_newest_checkpoints_are_kept(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    for step in (20, 40, 60, 80):
        save(directory, step)
    assert directory.published_steps() == [60, 80]
    assert directory.latest_step() == 80


def test_partials_left_by_a_killed_writer_are_discarded(tmp_path: Path) -> None:
    directory = CheckpointDirectory(tmp_path, keep_last=2)
    save(directory, 20)
    directory.begin(40)
    directory.discard_partials()
    assert sorted(p.name for p in tmp_path.iterdir()) == [LATEST_POINTER, "step-000000020"]


def test_a_pointer_to_a_missing_checkpoint_counts_as_none(tmp_path: Path) -> None:
    write_text_atomically(tmp_path / LATEST_POINTER, "step-000000020\n")
    assert CheckpointDirectory(tmp_path, keep_last=2).latest_step() is None


def test_keeping_no_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointDirectory(tmp_path, keep_last=0)
