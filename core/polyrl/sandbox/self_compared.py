"""Where the tests compare a reading with another reading of the same expression, found statically.

Why: ``b.log == b.log`` (or ``list(r) == list(r)``) holds whatever the value holds, yet it read
the value whole, and a whole reading that finds a value empty is the tests seeing it empty
(``Remote._plain_attribute``), which lets a later loop over it pass. A forged ``Bank`` whose log
gave ``len`` three -5s and ``[]`` after ``b.reset()`` passed ``len(b.log) == 3``, then ``assert
b.log == b.log`` and ``all(x > 0 for x in b.log)`` (1.0). Such a reading tells the tests nothing
of its items: it is no reading of theirs at all now.

Two readings of one value compared with each other are the same (``len(set(r)) == len(list(r))``,
``sorted(r) == [x for x in r]``): over no items they hold too. A site is a comparison with one
``==``, ``!=``, ``is`` or ``is not`` whose sides read the same expression (``ast.dump``, no literal)
under builtins made of its items alone (``len``, ``list``, ``set``, ``sorted``, ...) or a
comprehension copying it item by item; its places are each node from either side down to that
expression. ``Remote._snapshot`` keeps no reading of a sample's value made there either.
"""

from __future__ import annotations

import ast
import sys

from polyrl.sandbox.source_sites import Sites, place_of
from polyrl.sandbox.tests_guard import TESTS_FILES

_SAME = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
#: Builtins whose answer, of one argument, is made of that argument's items alone (or their count).
_WRAPPERS = frozenset({"len", "list", "tuple", "set", "frozenset", "sorted", "reversed", "iter", "dict"})
_COPIES = (ast.ListComp, ast.SetComp, ast.GeneratorExp)


def _subject(side: ast.expr) -> tuple[ast.expr, list[ast.expr]]:
    """The value ``side`` reads under its wrappers (``len(set(r))``, ``[x for x in r]``: ``r``),
    and every node from ``side`` down to it."""
    chain = [side]
    while True:
        node = chain[-1]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _WRAPPERS \
                and len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred):
            chain.append(node.args[0])
        elif isinstance(node, _COPIES) and len(node.generators) == 1 and not node.generators[0].ifs \
                and isinstance(node.elt, ast.Name) and isinstance(node.generators[0].target, ast.Name) \
                and node.elt.id == node.generators[0].target.id:
            chain.append(node.generators[0].iter)
        else:
            return node, chain


def _self_compared_site(node: ast.expr, parents: dict[int, ast.AST]) -> ast.expr | None:
    """``node`` itself where it is a site (module doc)."""
    above: ast.AST = node
    while True:  # up through the wrappers to the comparison
        parent = parents.get(id(above))
        if isinstance(parent, ast.Compare):
            break
        if parent is None or not isinstance(parent, (ast.Call, ast.comprehension, *_COPIES)):
            return None
        above = parent
    if len(parent.ops) != 1 or not isinstance(parent.ops[0], _SAME):
        return None
    left, right = _subject(parent.left), _subject(parent.comparators[0])
    if isinstance(left[0], (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict)) \
            or ast.dump(left[0]) != ast.dump(right[0]):
        return None
    return node if any(node is n for n in (*left[1], *right[1])) else None


_SITES = Sites(_self_compared_site, kinds=(ast.Attribute, ast.Call, ast.Name, *_COPIES))
#: Take the tests' sources for ``self_compared_here`` (``Sites.register``).
register = _SITES.register


def self_compared_above(limit: int = 12) -> bool:
    """Whether the nearest frame above this call that is the tests' own code (at most ``limit``
    up) stands at a site: a sample's value read whole by ``list(r) == list(r)`` reaches its
    ``_snapshot`` through ``__len__`` or ``__iter__``, at more than one depth."""
    frame = sys._getframe(1)
    for _ in range(limit):
        if frame.f_code.co_filename in TESTS_FILES:
            return _SITES.has(place_of(frame.f_code, frame.f_lasti))
        if frame.f_back is None:
            return False
        frame = frame.f_back
    return False


def self_compared_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking) is the
    tests' own code at a site (module doc)."""
    return _SITES.here(depth)
