"""How a test runner runs one test function it found: which it leaves out, and how a generator runs.

Why a module of its own: ``test_cells`` decides which statements of a cell are tests; what a
runner does with one test function once found (a generator run nose-style, an expected failure
left out) is a separate rule set, and each rule closed a shape that gave a wrong completion credit.
"""

from __future__ import annotations

import ast
import os
import platform
import sys

#: Decorators saying the runner expects the test to fail (``@pytest.mark.xfail``,
#: ``@unittest.expectedFailure``).
_EXPECTED_FAILURES = frozenset({"xfail", "expectedFailure"})


def expects_failure(node: ast.stmt) -> bool:
    """Whether a test function, method or class is marked to fail (``_EXPECTED_FAILURES``); such a
    test is left out, as a ``pytest.param`` marked xfail is. Why: run as a plain test, a right
    solution failed it (it tests a known bug) and a wrong one giving the buggy answer passed it,
    where a runner counts an unexpected pass as no success."""
    decorators = getattr(node, "decorator_list", [])
    return any(_decorator_name(d) in _EXPECTED_FAILURES and _applies(d) for d in decorators)


#: what pytest evaluates an xfail condition with (its string conditions; the names a bool one reads)
_CONDITION_NAMES = {"os": os, "sys": sys, "platform": platform}


def _applies(decorator: ast.expr) -> bool:
    """Whether an xfail mark applies here: one without a condition always; ``xfail(*conditions,
    condition=...)`` where any condition is true on this interpreter, as pytest reads it. A
    condition that reads anything but ``sys``, ``os`` and ``platform`` (a name of the tests') is
    taken as true (left out, as before). Why: ``@pytest.mark.xfail(sys.platform == "win32")`` is a
    plain test to pytest on Linux; left out as a known failure, its checks were gone and a wrong
    solution passed them."""
    if not isinstance(decorator, ast.Call):
        return True
    conditions = [*decorator.args, *(k.value for k in decorator.keywords if k.arg == "condition")]
    return not conditions or any(_true(condition) for condition in conditions)


def _true(condition: ast.expr) -> bool:
    """``condition`` evaluated over ``_CONDITION_NAMES`` alone (a string one parsed first); True
    where it reads anything else, calls anything but a ``platform`` function, or raises."""
    if isinstance(condition, ast.Constant) and isinstance(condition.value, str):
        try:
            condition = ast.parse(condition.value, mode="eval").body
        except SyntaxError:
            return True
    for node in ast.walk(condition):
        if isinstance(node, ast.Name) and node.id not in _CONDITION_NAMES:
            return True
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return True
        if isinstance(node, ast.Call) and not (
                isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "platform" and not node.args and not node.keywords):
            return True
        if isinstance(node, (ast.Lambda, ast.NamedExpr, ast.comprehension, ast.Starred, ast.BinOp)):  # no work
            return True
    try:
        return bool(eval(compile(ast.Expression(condition), "<xfail>", "eval"),  # noqa: S307 - names checked above
                         {"__builtins__": {}, **_CONDITION_NAMES}))
    except Exception:  # noqa: BLE001 - not decidable here: left out, as an xfail
        return True


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
