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
Only within the first ``WINDOW`` lines: moved down without end, a cell of n one-line asserts would be
n^2 / 2 blank lines (200 million characters at 20,000 asserts); past it the steps start again from
the top, each after the one before, in a file of another name (``tests_guard.WINDOW_FILES``), so
no two steps share a place. Why: in one file, a module-level forgery's ``assert len(r) == 3`` at
line 2 was taken for a vacuous ``assert len(r) >= 0`` a thousand lines down, laid out at line 2 too,
and the loop after ``r.reset()`` passed (1.0). Only past ``len(WINDOW_FILES)`` windows (a million
lines) do steps of the last file share places.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence

from polyrl.sandbox.tests_guard import WINDOW_FILES

#: The lines steps are laid out within before they start again from the top (``laid_out``).
WINDOW = 1000


def at_line(source: str, line: int) -> str:
    """``source`` starting on ``line`` (blank lines before it), at most ``WINDOW`` lines down: one
    past the window starts again from the top in ``laid_out``."""
    return "\n" * min(line - 1, WINDOW) + source


def laid_out(steps: Sequence[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """``steps`` as ``laid_out_in_files`` lays them out, without their files."""
    return [(source, is_test) for source, is_test, _ in laid_out_in_files(steps)]


def laid_out_in_files(steps: Sequence[tuple[str, bool]]) -> list[tuple[str, bool, str]]:
    """``steps`` each at its line (the blank lines before it), moved down where its code would start
    on or above a line of the step before it, or from the top of the next file (``WINDOW_FILES``)
    once past ``WINDOW`` lines; each with the file it runs as. A step that does not parse (it fails
    when run) is left as it is."""
    out: list[tuple[str, bool, str]] = []
    end, window, wrapped = 0, 0, False  # the last line of the steps so far; their window (file); past one yet
    for source, is_test in steps:
        body = source.lstrip("\n")
        span = _span(body)
        if span is None:
            out.append((source, is_test, WINDOW_FILES[window]))
            continue
        first, last = span
        wanted = len(source) - len(body)  # the blank lines before it: its line of the cell, less one
        top = max(0, end + 1 - first) if wrapped else max(wanted, end + 1 - first)
        if top + last > WINDOW:  # from the top, of the next file where this one holds code: no place shared
            window = min(window + 1, len(WINDOW_FILES) - 1) if end > 0 else window
            wrapped, top = True, 0
        out.append(("\n" * top + body, is_test, WINDOW_FILES[window]))
        end = top + last
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
