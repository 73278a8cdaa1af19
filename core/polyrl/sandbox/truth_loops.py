"""The tests' ``all``, ``any`` and ``sum``: a check over each item, as the loop they stand for is.

Why: ``all(r)`` of a value holds over no items, so a forged ``flags`` whose value gave ``len``
three False items and nothing once passed to a function of the sample's (``show(r)``) or once the
tests called one of its own methods as a statement (``r.reset()``) passed ``len(r) == 3`` and then
``assert all(r)`` (1.0): Python's ``all`` asked ``__iter__`` from the tests' call, which
``shrinking.looped_here`` took for a whole reading (as ``list(r)`` is), while ``all(x for x in r)``
already failed there. These stand-ins ask it from a frame ``shrinking.loops_over`` registers, so
``all(r)``, ``any(r)`` and ``not any(r)`` are read as ``all(x for x in r)`` is: a value emptied
since its last whole reading fails there unless the tests read it whole and empty, before or
after (``len(q) == 0``, ``list(q) == []``, ``not q``); a value that keeps its items is read as before.

``sum`` likewise: ``sum(r) == 0`` and ``sum(r) <= k`` hold over no items, and the forged value
emptied so passed ``len(r) == 3`` and then ``assert sum(r) <= 2`` (1.0). What it costs: a right
value the tests empty and check only by ``sum(q) == 0`` (never ``len(q) == 0``, ``not q``) scores
0 there; one that keeps its items as zeros (a histogram's ``reset``) is read as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from polyrl.sandbox.shrinking import loops_over


@loops_over
def tests_all(iterable: Iterable[Any], /) -> bool:
    """``all`` as the tests see it: Python's, over an iterator asked from here (module doc)."""
    return all(iterable)


@loops_over
def tests_any(iterable: Iterable[Any], /) -> bool:
    """``any`` as the tests see it: Python's, over an iterator asked from here (module doc)."""
    return any(iterable)


@loops_over
def tests_sum(iterable: Iterable[Any], /, start: Any = 0) -> Any:
    """``sum`` as the tests see it: Python's, over an iterator asked from here (module doc)."""
    return sum(iterable, start)


tests_all.__name__ = tests_all.__qualname__ = "all"
tests_any.__name__ = tests_any.__qualname__ = "any"
tests_sum.__name__ = tests_sum.__qualname__ = "sum"
