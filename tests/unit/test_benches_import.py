"""Every benchmark module imports: a bench is run by hand, so a name it imports from the code or the
tests that went away (a renamed helper) would otherwise be found only by the next person to measure."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# Run as scripts inside the trainer's pods, with bench/ on the path: not importable as bench.<name>.
SCRIPTS = {"sigterm_trainer"}


@pytest.mark.parametrize(
    "name", sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in {"__init__", *SCRIPTS})
)
def test_the_benchmark_imports(name: str) -> None:
    importlib.import_module(f"bench.{name}")
