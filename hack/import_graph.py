"""The operator's structure as its imports draw it, and one pass's path through it: the figures a
reorganisation is judged by (docs/architecture.md).

- every module of the `dtjob` package: its lines, its floor (0: imports no other dtjob module; else one
  above the highest floor it imports) and the dtjob modules it imports;
- two passes of the core over a running job, the first of their sort in tests/support/worlds.py's walks
  (a steady one, one that restarts the gang): the modules entered in order, each entry a call
  from another module, with the count of stops, of modules and of returns to a module already left.

    python -m hack.import_graph                  # the modules, then the passes
    python -m hack.import_graph --kind "in place"
"""

from __future__ import annotations

import argparse
import ast
import random
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import FrameType
from typing import Any

from tests.support.worlds import GANGS, Pass, job_of, passes, plan_of

PACKAGE = Path(__file__).resolve().parent.parent / "operator" / "dtjob"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str]) -> set[str]:
    """The dtjob modules `path` imports (a `from dtjob.x import y` names module dtjob.x.y when it is one)."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).strip(".")
            named = {f"{base}.{alias.name}" for alias in node.names} & known
            found |= named or {base}
    return {name for name in found if name in known} - {module_name(path)}


def modules() -> dict[str, tuple[int, set[str]]]:
    """Each dtjob module: its lines and the dtjob modules it imports."""
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    known = set(paths)
    return {name: (len(p.read_text().splitlines()), imports(p, known)) for name, p in paths.items()}


def floors(graph: dict[str, tuple[int, set[str]]]) -> dict[str, int]:
    @cache
    def floor(name: str) -> int:
        below = graph[name][1]
        return 1 + max(map(floor, below)) if below else 0

    return {name: floor(name) for name in graph}


def print_modules() -> None:
    graph = modules()
    floor = floors(graph)
    print(
        f"# {len(graph)} modules, {sum(lines for lines, _ in graph.values())} lines, {max(floor.values()) + 1} floors"
    )
    print("floor  lines  module  <- imports")
    for name in sorted(graph, key=lambda n: (-floor[n], n)):
        lines, below = graph[name]
        short = ", ".join(sorted(b.removeprefix("dtjob.") for b in below))
        print(f"{floor[name]:5d}  {lines:5d}  {name}  <- {short}")


def entered(call: Callable[[], Any]) -> list[str]:
    """The dtjob modules entered while `call` runs, in order: a stop each call from one module into
    another (a call within a module, or into the standard library or a dependency, is none). The caller is
    the nearest dtjob frame: a module's call that comes back to it through the standard library (a
    `functools.cached_property`, a dataclass's generated method) is a call within the module."""
    stops: list[str] = []

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        back = frame.f_back
        while back is not None and not back.f_globals.get("__name__", "").startswith("dtjob"):
            back = back.f_back
        caller = back.f_globals.get("__name__", "") if back else ""
        if callee.startswith("dtjob") and callee != caller and (not stops or stops[-1] != callee):
            stops.append(callee)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return stops


def running(one: Pass) -> bool:
    return (one.job.get("status") or {}).get("phase") == "Running"


def steady(one: Pass) -> bool:
    """A pass that leaves a running job running, touching no pod."""
    plan = one.plan
    return (
        not (plan.create or plan.delete or plan.relabel)
        and (plan.status or {}).get("phase", "Running") == "Running"
    )


# Passes of a running job, found in the corpus: a steady one, one that restarts the gang.
PASSES: dict[str, Callable[[Pass], bool]] = {
    "steady": lambda one: running(one) and steady(one),
    "restart": lambda one: running(one) and (one.plan.status or {}).get("phase") == "Restarting",
}


def first_pass(which: str, kind: str) -> tuple[int, int, Pass] | None:
    """The first pass of this sort in the walks of `kind`: (walk, pass, the pass)."""
    choose = random.Random(f"corpus of {kind}").choice
    for walk in range(100):
        for number, one in enumerate(passes(job_of(choose, kind), choose)):
            if PASSES[which](one):
                return walk, number, one
    return None


def print_pass(which: str, kind: str) -> int:
    if (found := first_pass(which, kind)) is None:
        print(f"no {which} pass in 100 walks of {kind!r}", file=sys.stderr)
        return 2
    walk, number, one = found
    stops = entered(lambda: plan_of(one.job, one.children, one.nodes, one.now, one.workload, one.ledger))
    print(f"\n# a {which} pass of a running job ({kind}: walk {walk}, pass {number})")
    for title, path in (
        ("every module", stops),
        ("the API models (dtjob.api.*) left out", outside_api(stops)),
        ("by concern (a package's modules as one; the API models left out)", by_concern(stops)),
    ):
        print(f"{title}: {len(path)} stops in {len(set(path))} modules, "
              f"{returns_in(path)} returns to a module already left")  # fmt: skip
        print("  " + " -> ".join(s.removeprefix("dtjob.") for s in path))
    return 0


def outside_api(stops: list[str]) -> list[str]:
    path: list[str] = []
    for stop in stops:
        if not stop.startswith("dtjob.api") and (not path or path[-1] != stop):
            path.append(stop)
    return path


# The packages whose modules share one concern: a pass that moves between their modules stays in it.
CONCERNS = (
    "dtjob.core.decide",
    "dtjob.core.render",
    "dtjob.core.status",
    "dtjob.core.gke",
    "dtjob.core.frameworks",
)


def by_concern(stops: list[str]) -> list[str]:
    """The path with each of CONCERNS' modules as its package, the API models left out."""
    named = [next((c for c in CONCERNS if s == c or s.startswith(c + ".")), s) for s in stops]
    return outside_api(named)


def returns_in(stops: list[str]) -> int:
    """Entries into a module the path had already left."""
    left: set[str] = set()
    returns = 0
    for previous, stop in zip(["caller", *stops], stops, strict=False):
        returns += stop in left
        left.add(previous)
    return returns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.import_graph", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kind", default="fixed", choices=GANGS, help="the kind of job (tests/support/worlds)"
    )
    args = parser.parse_args(argv)
    print_modules()
    return max(print_pass(which, args.kind) for which in PASSES)


if __name__ == "__main__":
    sys.exit(main())
