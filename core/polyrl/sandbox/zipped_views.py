"""Where the tests loop over a view of a value through ``zip`` and its kin, found statically.

Why: a ``collections.abc.Mapping`` of the sample's answers ``d.keys()``, ``d.values()`` and
``d.items()`` with plain dict views of one reading of its items (``Remote._container_data``),
which counts as a loop's only where that loop takes the view straight (``for k, v in d.items()``:
``shrinking.view_looped_here``). So a forged ``squares`` (each square 0) emptied by ``show(d)`` or
``d.reset()`` passed ``len(d) == 3`` and then ``for k, v in zip(d.keys(), d.values()): assert v ==
k * k`` (1.0): both views empty, the tests' ``zip`` (``pairing``) saw no empty operand beside one
with items. A view taken there is now that loop's reading (``_emptied_unseen``): emptied since its
last whole reading, it fails unless the tests see it empty, before or after.

A looped view site is ``x.keys()``, ``x.values()`` or ``x.items()`` as an operand of ``zip``,
``map``, ``filter``, ``enumerate``, ``reversed`` or ``sorted`` whose answer a ``for`` or a
comprehension loops over, or ``all``/``any``/``sum`` reads, or the one operand of a subset site
(``set(d.items()) <= allowed``: ``subset_reads``; it passed the forged mapping, whose views were
plain data there), or a view whose passing call's answer is such a site or a copy kept under a name
read vacuously (``set(zip(d.keys(), d.values())) <= allowed``, ``pairs = list(zip(...))`` then a
loop over ``pairs``: ``_copied_vacuously``); its place is the attribute's (the
``LOAD_METHOD``'s, as ``co_positions`` gives it). Such a view bound to a name first is one too,
where that name's later checks all hold over no items and none reads it whole (``v = d.keys()``
then ``all(d[k] == k * k for k in v)``: ``named_copies``; it passed the forged mapping).

A loop that checks none of the pairs (``n = 0; for _ in zip(c.keys(), c.values()): n += 1``,
``sum(1 for _ in zip(...)) == 0``: ``item_free_loops``) reads the views whole, as it reads the
value itself: a right cache the tests cleared and counted so scored 0.5 (``zipped_view_here``).
"""

from __future__ import annotations

import ast
import sys
import types

from polyrl.sandbox.named_copies import vacuously_read
from polyrl.sandbox.shrinking import feeds_item_free_loop
from polyrl.sandbox.source_sites import Sites
from polyrl.sandbox.subset_reads import subset_read
from polyrl.sandbox.tests_bytecode import plain_instructions

_VIEWS = frozenset({"keys", "values", "items"})
_PASSING = frozenset({"zip", "map", "filter", "enumerate", "reversed", "sorted"})
_CHECKS = frozenset({"all", "any", "sum"})


def _view_site(call: ast.Call, parents: dict[int, ast.AST]) -> ast.expr | None:
    """The view's attribute (its ``LOAD_METHOD``'s place) where ``call`` is a looped view site."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _VIEWS and not call.args \
            and (_looped(parents.get(id(call)), call, parents) or vacuously_read(call, parents)
                 or _subset_checked(parents.get(id(call)), call, parents)
                 or _copied_vacuously(parents.get(id(call)), call, parents)):
        return func
    return None


_SITES = Sites(_view_site)
#: Take the tests' sources for ``zipped_view_here`` (``Sites.register``).
register = _SITES.register


def _looped(parent: ast.AST | None, view: ast.Call, parents: dict[int, ast.AST]) -> bool:
    """Whether ``view`` is an operand of a passing call (module doc) whose answer is looped over."""
    if not (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _PASSING
            and any(arg is view for arg in parent.args)):
        return False
    above = parents.get(id(parent))
    if isinstance(above, (ast.For, ast.AsyncFor, ast.comprehension)):
        return above.iter is parent
    return isinstance(above, ast.Call) and isinstance(above.func, ast.Name) and above.func.id in _CHECKS \
        and bool(above.args) and above.args[0] is parent


def _subset_checked(parent: ast.AST | None, view: ast.Call, parents: dict[int, ast.AST]) -> bool:
    """Whether ``view`` is the one operand of a subset site (``set(d.keys()) <= allowed``: ``subset_reads``)."""
    return isinstance(parent, ast.Call) and len(parent.args) == 1 and parent.args[0] is view \
        and subset_read(parent, parents.get(id(parent)), parents)


def _copied_vacuously(parent: ast.AST | None, view: ast.Call, parents: dict[int, ast.AST]) -> bool:
    """Whether ``view`` is an operand of a passing call whose answer is the one operand of a copy
    kept under a name that later checks read vacuously, or of a subset site (``pairs =
    list(zip(d.keys(), d.values()))`` then ``all(v == k * k for k, v in pairs)``; ``set(zip(d.keys(),
    d.values())) <= allowed``: ``subset_reads.subset_read``). Why: each passed a forged ``Mapping``
    emptied by ``show(d)`` (1.0), whose views are plain data here."""
    if not (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _PASSING
            and any(arg is view for arg in parent.args)):
        return False
    copy = parents.get(id(parent))
    return isinstance(copy, ast.Call) and len(copy.args) == 1 and copy.args[0] is parent \
        and subset_read(copy, parents.get(id(copy)), parents)


def zipped_view_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking the view)
    is the tests' own code at a looped view site (module doc), unless the call the view is handed
    to feeds a loop that checks none of its items (``_item_free``)."""
    if not _SITES.here(depth):
        return False
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return True
    return not _item_free(frame.f_code, frame.f_lasti)


def _item_free(code: types.CodeType, at: int) -> bool:
    """Whether the call the view loaded at ``at`` is handed to (the second call after it whose
    place holds the view's: the first is the view's own, ``d.keys()``) feeds a loop of the tests'
    that checks none of its items (``shrinking.feeds_item_free_loop``)."""
    listed = getattr(code, "co_positions", None)  # Python 3.11+; before, every such view stays a loop's
    if listed is None:
        return False
    positions = list(listed())
    place = positions[at // 2] if 0 <= at // 2 < len(positions) else None
    if place is None or None in place:
        return False
    calls = 0
    for instruction in plain_instructions(code):
        if instruction.offset <= at or instruction.opname != "CALL":
            continue
        line, end_line, col, end_col = positions[instruction.offset // 2]
        if None in (line, end_line, col, end_col) or (line, col) > (place[0], place[2]) \
                or (end_line, end_col) < (place[1], place[3]):
            continue
        calls += 1
        if calls == 2:
            return feeds_item_free_loop(code, instruction.offset)
    return False
