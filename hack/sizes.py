"""Print functions over 60 lines and modules over 400 lines under the given folders (default: the core and the runtime)."""

import ast
import sys
from pathlib import Path

roots = sys.argv[1:] or ["operator/dtjob/core", "operator/dtjob/runtime"]
for root in roots:
    for path in sorted(Path(root).rglob("*.py")):
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > 400:
            print(f"MODULE {path}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    print(f"FUNCTION {path}:{node.lineno} {node.name}: {n} lines")
