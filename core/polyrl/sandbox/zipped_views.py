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
comprehension loops over, or ``all``/``any``/``sum`` reads; its place is the attribute's (the
``LOAD_METHOD``'s, as ``co_positions`` gives it). Not covered: such a view bound to a name first.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterable

from polyrl.sandbox.subset_reads import Place, place_of

_VIEWS = frozenset({"keys", "values", "items"})
_PASSING = frozenset({"zip", "map", "filter", "enumerate", "reversed", "sorted"})
_CHECKS = frozenset({"all", "any", "sum"})
_sites: Callable[[], frozenset[Place]] = frozenset


def register(sources: Iterable[tuple[str, str]]) -> None:
    """Take the tests' sources ((filename, text) as ``harness.run_tests`` compiles them) for ``zipped_view_here``."""
    global _sites
    found: list[frozenset[Place]] = []
    listed = list(sources)

    def sites() -> frozenset[Place]:
        if not found:
            found.append(view_sites(listed))
        return found[0]

    _sites = sites


def view_sites(sources: Iterable[tuple[str, str]]) -> frozenset[Place]:
    """The places of the looped view sites of ``sources`` (module doc); sources that do not parse add none."""
    places: set[Place] = set()
    for filename, text in sources:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _VIEWS and not node.args \
                    and _looped(parents.get(id(node)), node, parents) \
                    and func.end_lineno is not None and func.end_col_offset is not None:
                places.add((filename, func.lineno, func.end_lineno, func.col_offset, func.end_col_offset))
    return frozenset(places)


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


def zipped_view_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking the view)
    is the tests' own code at a looped view site (module doc)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    return place_of(frame.f_code, frame.f_lasti) in _sites()
