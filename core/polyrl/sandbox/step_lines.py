"""The lines each of the tests' steps is compiled at: every step's own, none shared with another.

Why: the harness runs a cell statement by statement, each compiled on its own as ``<test>``, and
what a check reads is judged by its place in the tests' code (``source_sites``: filename, lines and
columns, as ``co_positions`` gives them). Numbered from line 1 each, two steps' code had the same
places: after ``assert len(r) == 3``, a later step's ``assert len(r) >= 0`` (a count every count
passes) made the first one's ``len(r)`` vacuous too, so a forged value emptied at ``r.reset()``
passed a module-level ``r = primes(3)``... (1.0; the same body in a function scored 0), and a real
check of a right solution could be taken for another step's vacuous one. Laid out here, the steps
are one file: each starts on its line of the cell where ``test_cells.parse_tests`` says (blank
lines before it) and after the step before it ends, so a traceback points at the cell's line.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence


def laid_out(steps: Sequence[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """``steps`` with blank lines put before a step where its code would start on or above a
    line of the step before it; a step that does not parse (it fails when run) is left as it is."""
    out: list[tuple[str, bool]] = []
    end = 0  # the last line of the steps so far
    for source, is_test in steps:
        span = _span(source)
        if span is None:
            out.append((source, is_test))
            continue
        first, last = span
        shift = max(0, end + 1 - first)
        out.append(("\n" * shift + source if shift else source, is_test))
        end = last + shift
    return out


def _span(source: str) -> tuple[int, int] | None:
    """The first and last lines of ``source``'s code (decorators included), or None where it
    does not parse or holds no code."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = list(_lines(ast.walk(tree)))
    if not lines:
        return None
    return min(first for first, _ in lines), max(last for _, last in lines)


def _lines(nodes: Iterable[ast.AST]) -> Iterable[tuple[int, int]]:
    for node in nodes:
        first = getattr(node, "lineno", None)
        if isinstance(first, int):
            last = getattr(node, "end_lineno", None)
            yield first, last if isinstance(last, int) else first
