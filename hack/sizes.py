"""The functions over 60 lines and the modules over 400 lines of the core and the runtime: the limits that
keep each one readable at a sitting (tests/unit/test_layout.py holds the tree to them).

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
LIMITED = ("operator/dtjob/core", "operator/dtjob/runtime")


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


if __name__ == "__main__":
    found = list(oversized(tuple(sys.argv[1:]) or LIMITED))
    print("\n".join(found) or f"none over {FUNCTION_LINES} lines a function, {MODULE_LINES} a module")
