"""The core and the runtime stay readable at a sitting: no function over 60 lines, no module over 400, no
function of the core over 6 parameters.
None is exempt today (a data catalogue that grew past the limit would be: a table reads as one; say so
here, with its reason)."""

from __future__ import annotations

import ast

from hack.sizes import oversized, parameters


def test_no_function_or_module_of_the_core_or_the_runtime_is_over_its_limit() -> None:
    assert list(oversized()) == [], "split along a natural seam (docs/architecture.md, adding a capability)"


def test_a_functions_parameters_are_counted_but_a_methods_self() -> None:
    source = "def f(a, b, /, c, *args, d, **kwargs): ...\nclass C:\n    def m(self, a, b=1): ...\n"
    counted = [parameters(n) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
    assert counted == [6, 2]
