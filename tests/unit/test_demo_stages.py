"""`make demo`'s stage table (hack/stages.py): the records the stages write and the table of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack import stages
from hack.stages import Record

T0 = 1_764_300_000.0


def test_the_table_lists_the_stages_as_they_started_with_their_span_seconds_and_state() -> None:
    records = [
        Record("image-dtjob-trainer-torch", T0 + 40, T0 + 400, "done"),
        Record("packages", T0, T0 + 0.2, "cached"),
        Record("go-k8s", T0 + 1, T0 + 527.4, "done"),
        Record("venv", T0 + 1, T0 + 40, "done"),
        Record("training", T0 + 600, T0 + 700, "failed"),
    ]
    assert stages.table(records).splitlines() == [
        "stage                       start     end  seconds  state",
        "packages                       0s      0s      0.2  cached",
        "go-k8s                         1s   8m47s    526.4  done",
        "venv                           1s     40s     39.0  done",
        "image-dtjob-trainer-torch     40s   6m40s    360.0  done",
        "training                   10m00s  11m40s    100.0  failed",
        "wall time 11m40s",
    ]
    assert stages.table([]) == "no stages recorded"


def test_a_record_reads_back_and_a_cached_one_never_replaces_what_this_run_recorded(tmp_path: Path) -> None:
    stages.write(tmp_path, "go-helm", T0, T0 + 61.5, "done")
    stages.write(tmp_path, "go-helm", T0 + 900, T0 + 900.1, "cached")  # the demo's cluster start asks again
    stages.write(tmp_path, "go-etcd", T0, T0 + 0.1, "cached")
    assert sorted(stages.load(tmp_path), key=lambda r: r.name) == [
        Record("go-etcd", T0, T0 + 0.1, "cached"),
        Record("go-helm", T0, T0 + 61.5, "done"),
    ]
    assert stages.load(tmp_path / "none") == []
    with pytest.raises(ValueError, match="none of cached, done, failed"):
        stages.write(tmp_path, "venv", T0, T0, "skipped")
