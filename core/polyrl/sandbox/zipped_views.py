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

from polyrl.sandbox.source_sites import Sites

_VIEWS = frozenset({"keys", "values", "items"})
_PASSING = frozenset({"zip", "map", "filter", "enumerate", "reversed", "sorted"})
_CHECKS = frozenset({"all", "any", "sum"})


def _view_site(call: ast.Call, parents: dict[int, ast.AST]) -> ast.expr | None:
    """The view's attribute (its ``LOAD_METHOD``'s place) where ``call`` is a looped view site."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _VIEWS and not call.args \
            and _looped(parents.get(id(call)), call, parents):
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


def zipped_view_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking the view)
    is the tests' own code at a looped view site (module doc)."""
    return _SITES.here(depth)
