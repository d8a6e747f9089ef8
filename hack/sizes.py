"""The functions over 60 lines and the modules over 400 lines of the core and the runtime, and the core's
functions over 6 parameters: the limits that keep each one readable at a sitting (tests/unit/test_layout.py
holds the tree to them). A step of the pass that wants more takes the pass's facts whole (core/decide's
`Facts`) instead of its pieces one by one.

    python hack/sizes.py [FOLDER ...]
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FUNCTION_LINES = 60
MODULE_LINES = 400
PARAMETERS = 6
LIMITED = ("operator/dtjob/core", "operator/dtjob/runtime")
# The runtime's edge still hands the pass its inputs piece by piece (issue 58, item 1).
PARAMETERS_LIMITED = ("operator/dtjob/core",)


def oversized(folders: tuple[str, ...] = LIMITED) -> Iterator[str]:
    """`path: N lines` for each module over the limit, `path:line name: N lines` for each function."""
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            name = path.relative_to(REPO)
            text = path.read_text()
            if (lines := len(text.splitlines())) > MODULE_LINES:
                yield f"{name}: {lines} lines"
            functions = (
                n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            )
            for node in functions:
                if (length := (node.end_lineno or node.lineno) - node.lineno + 1) > FUNCTION_LINES:
                    yield f"{name}:{node.lineno} {node.name}: {length} lines"
                if folder in PARAMETERS_LIMITED and (count := parameters(node)) > PARAMETERS:
                    yield f"{name}:{node.lineno} {node.name}: {count} parameters"


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's parameters, but a method's self or cls."""
    arguments = node.args
    named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return (
        len([a for a in named if a.arg not in ("self", "cls")])
        + bool(arguments.vararg)
        + bool(arguments.kwarg)
    )


if __name__ == "__main__":
    found = list(oversized(tuple(sys.argv[1:]) or LIMITED))
    print(
        "\n".join(found)
        or f"none over {FUNCTION_LINES} lines a function, {MODULE_LINES} a module, {PARAMETERS} parameters in the core"
    )
