"""When a solution's context manager may suppress what its ``with`` block in the tests raised.

Why: ``with suppress_errors(): raise ValueError`` tests a right context manager whose ``__exit__``
answers True, and the stand-in never let it suppress anything (``Remote.__exit__``), so such a
solution scored 0. Letting every answer of True suppress would let a forged one swallow the
tests' failed assert, or the wrong solution's own error, inside the block. So it may suppress
only an exception that could not hide a check: an ``Exception`` (not an ``AssertionError``, nor a
test runner's outcome), raised by the tests' own code and not through the sample (no frame of the
harness on its way: ``Session.ask`` raising what a call of the sample's raised), in a block that
asked the sample nothing (``Remote.__exit__``: their code raising on a wrong answer, ``must(f())``,
is a check of it) and holds no check at all (an ``assert``, a ``raise`` under a condition, a call named ``assert*``,
``fail``, ``raises``, ``warns``, an exit, or a call of a function of the tests' holding one of
those), in every ``with`` around the line that raised.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from polyrl.sandbox.tests_guard import TESTS_FILES

_HARNESS = os.path.dirname(os.path.abspath(__file__)) + os.sep
_CHECK_CALLS = frozenset({"fail", "raises", "warns", "exit", "quit", "_exit"})
#: (file, source) of the tests now running (``register``), and the spans read from them, once asked
_listed: list[tuple[str, str]] = []
_spans: list[dict[str, list[tuple[int, int, bool]]]] = []


def register(sources: Iterable[tuple[str, str]]) -> None:
    """Take the tests' sources ((filename, text) as ``harness.run_tests`` compiles them)."""
    global _listed, _spans
    _listed, _spans = list(sources), []


def may_suppress(kind: Any, traceback: TracebackType | None) -> bool:
    """Whether a solution's ``__exit__`` answering True may suppress this exception (module doc)."""
    if not (isinstance(kind, type) and issubclass(kind, Exception)) or issubclass(kind, AssertionError):
        return False
    if traceback is None or traceback.tb_frame.f_code.co_filename not in TESTS_FILES:
        return False
    tb: TracebackType | None = traceback
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_HARNESS):
            return False  # through the sample (or the harness refusing what the tests did)
        tb = tb.tb_next
    around = [free for first, last, free in _blocks().get(traceback.tb_frame.f_code.co_filename, ())
              if first <= traceback.tb_lineno <= last]
    return bool(around) and all(around)


def _blocks() -> dict[str, list[tuple[int, int, bool]]]:
    """file -> (first line, last line, holds no check) of each ``with`` body in the tests."""
    if _spans:
        return _spans[0]
    trees = []
    for file, source in _listed:
        try:
            trees.append((file, ast.parse(source)))
        except SyntaxError:
            continue
    checkers = {node.name for _, tree in trees for node in ast.walk(tree)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _holds_check(node.body, frozenset())}
    found: dict[str, list[tuple[int, int, bool]]] = {}
    for file, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.With, ast.AsyncWith)) and node.body:
                last = max(getattr(n, "end_lineno", None) or n.lineno for n in node.body)
                found.setdefault(file, []).append((node.body[0].lineno, last,
                                                   not _holds_check(node.body, frozenset(checkers))))
    _spans.append(found)
    return found


def _holds_check(body: list[ast.stmt], checkers: frozenset[str]) -> bool:
    top = {id(node) for node in body if isinstance(node, ast.Raise)}  # the block's subject: ``raise ValueError``
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assert) or (isinstance(node, ast.Raise) and id(node) not in top):
                return True
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                    node.func.id if isinstance(node.func, ast.Name) else ""
                if name.startswith("assert") or name in _CHECK_CALLS or name in checkers:
                    return True
    return False
