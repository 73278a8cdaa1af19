"""Two runs of one character class that meet (``[ \\t]*x?[ \\t]*``): a regex's quadratic backtracking,
read from its shape, because no counter can see it.

Why a shape check: ``tests/work_meter.py`` counts the regex engine's steps through its signal checks,
but a run of single characters is read, and given back one character at a time, in C loops that
never check (``sre``'s ``REPEAT_ONE`` fast path). A pattern whose run can hand its characters to
another run right after it (nothing but optional parts between) tries every split of a long run
before failing: a run of n blanks costs n * n / 2 steps in one match, invisible to any count.
Every such split point is reported; only single-character runs without an upper bound count.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

if sys.version_info >= (3, 11):
    from re import _constants as C
    from re import _parser as P
else:  # pragma: no cover - the same modules before 3.11
    import sre_constants as C
    import sre_parse as P

#: The characters a run is tried on: ASCII, Latin, and a few of the spaces and letters beyond.
_SAMPLE = [chr(i) for i in range(0x250)] + ["\u2003", "\u3000", "\u03c0", "\u4e00"]
_CATEGORIES: dict[Any, Callable[[str], bool]] = {
    C.CATEGORY_DIGIT: str.isdecimal, C.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
    C.CATEGORY_SPACE: str.isspace, C.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
    C.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    C.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
}
_ZERO_WIDTH = (C.AT, C.ASSERT, C.ASSERT_NOT)
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", C.MAX_REPEAT))


def _one_char(item: tuple[Any, Any], ch: str) -> bool | None:
    """Whether a one-character item matches ``ch`` (None: not a one-character item)."""
    op, av = item
    if op is C.LITERAL:
        return ord(ch) == av
    if op is C.NOT_LITERAL:
        return ord(ch) != av
    if op is C.ANY:
        return True
    if op is C.IN:
        negate, hit = False, False
        for o, a in av:
            if o is C.NEGATE:
                negate = True
            elif o is C.LITERAL:
                hit = hit or ord(ch) == a
            elif o is C.RANGE:
                hit = hit or a[0] <= ord(ch) <= a[1]
            else:  # a category; one not known here counts as matching (may only report more)
                hit = hit or _CATEGORIES.get(a, lambda _: True)(ch)
        return hit != negate
    return None


def _run(item: tuple[Any, Any]) -> frozenset[str] | None:
    """The sample characters of an unbounded run of one character class (``[ \\t]*``, ``\\w+``), or None."""
    op, av = item
    if op not in _REPEATS or av[1] != C.MAXREPEAT or len(av[2]) != 1:
        return None
    body = av[2][0]
    if _one_char(body, "a") is None:
        return None
    return frozenset(ch for ch in _SAMPLE if _one_char(body, ch))


def _edge_runs(items: Sequence[tuple[Any, Any]], last: bool) -> tuple[list[frozenset[str]], bool]:
    """The runs that can start (``last``: end) a match of ``items``, and whether it can be empty."""
    runs: list[frozenset[str]] = []
    for op, av in reversed(items) if last else items:
        run = _run((op, av))
        if run is not None:
            runs.append(run)
            if av[0] > 0:
                return runs, False
        elif op in _ZERO_WIDTH:
            continue
        elif op is C.SUBPATTERN:
            inner, empty = _edge_runs(av[-1], last)
            runs += inner
            if not empty:
                return runs, False
        elif op in _REPEATS:
            inner, empty = _edge_runs(av[2], last)
            runs += inner
            if av[0] > 0 and not empty:
                return runs, False
        elif op is C.BRANCH:
            empty = False
            for branch in av[1]:
                inner, branch_empty = _edge_runs(branch, last)
                runs += inner
                empty = empty or branch_empty
            if not empty:
                return runs, False
        else:
            return runs, False
    return runs, True


def _sequences(items: Sequence[tuple[Any, Any]]) -> Iterable[Sequence[tuple[Any, Any]]]:
    yield items
    for op, av in items:
        if op is C.SUBPATTERN:
            yield from _sequences(av[-1])
        elif op in _REPEATS:
            yield from _sequences(av[2])
        elif op is C.BRANCH:
            for branch in av[1]:
                yield from _sequences(branch)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            yield from _sequences(av[1])


def meeting_runs(pattern: str) -> list[str]:
    """Where a run of ``pattern`` can hand characters to a run after it: each pair as the
    characters both take (an empty list: none)."""
    found = []
    for items in _sequences(list(P.parse(pattern))):
        for split in range(1, len(items)):
            before, _ = _edge_runs(items[:split], last=True)
            after, _ = _edge_runs(items[split:], last=False)
            for a in before:
                for b in after:
                    if a & b:
                        found.append("".join(sorted(a & b))[:20])
    return found
