"""Where the tests hand a value to a helper function of their own that checks it where no items pass.

Why: a bank's ``log`` (built-in data) comes to the tests as a new copy at each read, and
``attribute_reads`` finds the checks that hold over no items only where the tests write them
around the attribute. A forged ``Bank`` whose log gave ``len`` three -5s and ``[]`` after
``b.reset()`` passed ``len(b.log) == 3`` and then ``assert positive(b.log)`` with the tests' ``def
positive(xs): return all(x > 0 for x in xs)`` (1.0), or ``check(b.log)`` looping and asserting.

A helper read is an argument of a call of a plain name that the tests' sources (all their steps)
define exactly once (``def``), bound to a named parameter whose reads in that function are checked at least once
where no items pass and never read whole (``named_copies.name_read_vacuously``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from polyrl.sandbox.named_copies import name_read_vacuously
from polyrl.sandbox.source_sites import parsed

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


class _Helpers:
    """The functions the tests' sources define (each source a step of theirs, parsed apart), by
    name, with each one's parents (by ``id``); parsed the first time one is asked."""

    def __init__(self) -> None:
        self._sources: list[tuple[str, str]] = []
        self._found: dict[str, list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, dict[int, ast.AST]]]] | None = None

    def register(self, sources: Iterable[tuple[str, str]]) -> None:
        self._sources, self._found = list(sources), None

    def defined(self, name: str) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, dict[int, ast.AST]]]:
        if self._found is None:
            self._found = {}
            for _, tree, parents in parsed(self._sources):
                for node in ast.walk(tree):
                    if isinstance(node, _DEFS):
                        self._found.setdefault(node.name, []).append((node, parents))
        return self._found.get(name, [])


_HELPERS = _Helpers()
#: Take the tests' sources (``harness.run_tests``' steps and setup) whose ``def``s ``helper_read`` reads.
register = _HELPERS.register


def _parameter(function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, arg: ast.expr) -> str | None:
    """The name of ``function``'s parameter that ``arg`` of ``call`` binds, or None."""
    positional = [*function.args.posonlyargs, *function.args.args]
    for n, given in enumerate(call.args):
        if given is arg:
            if any(isinstance(a, ast.Starred) for a in call.args[:n + 1]):
                return None
            return positional[n].arg if n < len(positional) else None
    named = {a.arg for a in [*function.args.args, *function.args.kwonlyargs]}
    for keyword in call.keywords:
        if keyword.value is arg and keyword.arg in named:
            return keyword.arg
    return None


def helper_read(call: ast.Call, arg: ast.expr, parents: dict[int, ast.AST]) -> bool:
    """Whether ``arg`` of ``call`` is a helper read (module doc)."""
    if not isinstance(call.func, ast.Name):
        return False
    defined = _HELPERS.defined(call.func.id)
    if len(defined) != 1:
        return False
    function, own = defined[0]
    parameter = _parameter(function, call, arg)
    if parameter is None:
        return False
    start = function.body[0]
    return name_read_vacuously(function, parameter, (start.lineno, start.col_offset), own)
