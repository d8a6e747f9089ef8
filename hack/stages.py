"""The stage table `make demo` prints at its end: each stage of the run (the Debian packages, the venv,
each Go component, each image, the cluster, the install, the training), when it started, how long it
took, and whether its result was there already.

Each stage records itself as it ends, into $DTJOB_STAGES_DIR (`make demo` empties .artifacts/demo-stages/
and points there; unset, nothing is recorded): a file named after the stage holding "STARTED ENDED
STATE", Unix times and one of STATES. The make steps record with `python -m hack.stages record` (the
system python3: the venv may not be there yet), the Python ones with `stage`. A stage asked for again
in the same run (the demo's cluster start checks the Go builds) finds its record there: a `cached`
record never replaces one.

Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

STATES = ("cached", "done", "failed")
"""cached: the result was there (a Go build's or image's content, packages installed, the cluster up);
done: the stage did its work; failed: it raised or its command failed."""


@dataclass(frozen=True)
class Record:
    name: str
    started: float
    ended: float
    state: str


def _directory() -> Path | None:
    where = os.environ.get("DTJOB_STAGES_DIR")
    return Path(where) if where else None


def record(name: str, started: float, state: str) -> None:
    """Stage `name`, begun at `started` (Unix time), ended now in `state`, when stages are recorded."""
    if (directory := _directory()) is not None:
        write(directory, name, started, time.time(), state)


def write(directory: Path, name: str, started: float, ended: float, state: str) -> None:
    if state not in STATES:
        raise ValueError(f"state {state!r} is none of {', '.join(STATES)}")
    path = directory / name
    if state == "cached" and path.exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{started} {ended} {state}\n")


@dataclass
class Stage:
    """What the block of `stage` says of its end."""

    cached: bool = False
    failed: bool = False


@contextlib.contextmanager
def stage(name: str) -> Iterator[Stage]:
    """Records the block as stage `name`: failed if it raises or says so, else cached or done as it says."""
    started, this = time.time(), Stage()
    try:
        yield this
    except BaseException:
        record(name, started, "failed")
        raise
    record(name, started, "failed" if this.failed else "cached" if this.cached else "done")


def parse(name: str, text: str) -> Record:
    started, ended, state = text.split()
    return Record(name, float(started), float(ended), state)


def load(directory: Path) -> list[Record]:
    if not directory.is_dir():
        return []
    return [parse(path.name, path.read_text()) for path in directory.iterdir() if path.is_file()]


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def table(records: Sequence[Record]) -> str:
    """The records in the order they started: each one's start and end as time since the first start
    (stages side by side overlap), its seconds and state; then the wall time from the first start to
    the last end."""
    if not records:
        return "no stages recorded"
    ordered = sorted(records, key=lambda r: (r.started, r.name))
    origin = ordered[0].started
    width = max(len("stage"), *(len(r.name) for r in ordered))
    lines = [f"{'stage':<{width}}  {'start':>6}  {'end':>6}  {'seconds':>7}  state"]
    lines += [
        f"{r.name:<{width}}  {_clock(r.started - origin):>6}  {_clock(r.ended - origin):>6}  "
        f"{r.ended - r.started:>7.1f}  {r.state}"
        for r in ordered
    ]
    lines.append(f"wall time {_clock(max(r.ended for r in ordered) - origin)}")
    return "\n".join(lines)


def print_table() -> None:
    """The table of this run's records, when stages are recorded."""
    directory = _directory()
    if directory is not None:
        print(f"[stages] {directory}:\n{table(load(directory))}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.stages", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("record", help="record a stage that ended now")
    add.add_argument("name")
    add.add_argument("started", type=float, help="Unix time (date +%%s.%%N)")
    add.add_argument("state", choices=STATES)
    commands.add_parser("table", help="print this run's stage table")
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.name, args.started, args.state)
    else:
        print_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
