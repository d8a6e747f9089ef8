"""The health table of docs/gitops.md (what each GitOps tool says of each captured state) and the
`kubectl wait` commands the docs give, read from the docs, so that the tests check what users read.
tests/gitops/health_test.go reads the same table for Flux's columns."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.support.paths import REPO

DOCS: Final = REPO / "docs" / "gitops.md"
STATE_COLUMN: Final = "captured state"
PHASE_COLUMN: Final = "phase"
ARGO_CD_COLUMN: Final = "Argo CD"
NO_PHASE: Final = "(none)"
# A kubectl wait column says one of these of a state.
MET, WAITS = "met", "waits"
_LINK = re.compile(r"\]\(([^)]+)\)")
_WAIT = re.compile(r"^kubectl wait .*$", re.MULTILINE)  # a command line of a code block


@dataclass(frozen=True)
class Row:
    state: str
    """The captured file's name, without .yaml (tests/support/gitops_states.py's key)."""
    cells: dict[str, str]
    """Each column's cell, by header, without backticks."""


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def health_table(text: str | None = None) -> list[Row]:
    """The rows of the docs' table whose first column is STATE_COLUMN, each state's cell a link to its
    captured file."""
    lines = (text if text is not None else DOCS.read_text()).splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith("|") and _cells(line)[0] == STATE_COLUMN
    )
    header = [cell.strip("`") for cell in _cells(lines[start])]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        link = _LINK.search(cells[0])
        assert link is not None, f"docs/gitops.md: the state {cells[0]!r} links to no captured file"
        rows.append(
            Row(Path(link.group(1)).stem, dict(zip(header, (c.strip("`") for c in cells), strict=True)))
        )
    return rows


def wait_columns(row: Row) -> dict[str, str]:
    """The row's `kubectl wait` columns, keyed by the --for value the command passes to kubectl (the
    shell's quotes removed)."""
    return {for_flag(header): cell for header, cell in row.cells.items() if header.startswith("kubectl wait")}


def for_flag(command: str) -> str:
    """The --for value a documented `kubectl wait` command passes to kubectl."""
    return next(arg for arg in shlex.split(command) if arg.startswith("--for="))


def documented_waits(*pages: Path) -> set[str]:
    """The --for values of every `kubectl wait` command the pages' code blocks give."""
    return {for_flag(command) for page in pages for command in _WAIT.findall(page.read_text())}
