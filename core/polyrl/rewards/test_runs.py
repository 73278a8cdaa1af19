"""How a test runner runs one test function it found: which it leaves out, and how a generator runs.

Why a module of its own: ``test_cells`` decides which statements of a cell are tests; what a
runner does with one test function once found (a generator run nose-style, an expected failure
left out) is a separate rule set, and each rule closed a shape that gave a wrong completion credit.
"""

from __future__ import annotations

import ast

#: Decorators saying the runner expects the test to fail (``@pytest.mark.xfail``,
#: ``@unittest.expectedFailure``).
_EXPECTED_FAILURES = frozenset({"xfail", "expectedFailure"})


def expects_failure(node: ast.stmt) -> bool:
    """Whether a test function, method or class is marked to fail (``_EXPECTED_FAILURES``); such a
    test is left out, as a ``pytest.param`` marked xfail is. Why: run as a plain test, a right
    solution failed it (it tests a known bug) and a wrong one giving the buggy answer passed it,
    where a runner counts an unexpected pass as no success."""
    decorators = getattr(node, "decorator_list", [])
    return any(_decorator_name(d) in _EXPECTED_FAILURES for d in decorators)


def _decorator_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id
    return target.attr if isinstance(target, ast.Attribute) else None


def yields(node: ast.stmt) -> bool:
    """Whether a test function is a generator: a ``yield`` in its own body (not a nested function's)."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        inner = todo.pop()
        if isinstance(inner, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(inner))
    return False


def drive(call: str) -> str:
    """A generator test run as nose (and pytest before 4.0) ran it: to its end, calling each check
    it yields (``yield check_even, n``). Why: calling it only makes a generator, so none of its body
    ran and every completion, a wrong one too, passed it (pytest now refuses such a test)."""
    return (f"for _polyrl_check in {call}:\n"
            "    if type(_polyrl_check) is tuple and _polyrl_check and callable(_polyrl_check[0]):\n"
            "        _polyrl_check[0](*_polyrl_check[1:])")
