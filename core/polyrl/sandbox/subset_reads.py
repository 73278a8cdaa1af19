"""Where the tests read a value by a subset check: ``set(r) <= allowed`` and its kin, found statically.

Why: a subset check holds over no items, as ``all(x in allowed for x in r)`` does, so a forged
``primes`` whose value gave ``len`` three 4s and nothing once passed to a function of the
sample's (``show(r)``) or once the tests called one of its methods as a statement (``r.reset()``)
passed ``len(r) == 3`` and then ``assert set(r) <= {2, 3, 5, 7}`` (1.0): ``set`` asked ``__iter__``
from the tests' call, which ``shrinking.looped_here`` took for a whole reading (as ``set(r) ==
{2, 3}`` is). Such a call now reads the value as the tests' loop does (``Remote._emptied_unseen``):
emptied since its last whole reading, it fails unless the tests see it empty, before or after.

A subset site is a call of the tests' whose place (``co_positions``) is one of: ``set(x)`` or
``frozenset(x)`` on the smaller side of ``<=``/``<`` (``a >= set(x)`` too), or the receiver of
``.issubset(...)`` or ``.isdisjoint(...)``; or ``a.issuperset(x)``/``a.isdisjoint(x)`` itself,
which reads ``x`` from there. A copy bound to a name first is one too where that name's later
checks all hold over no items and none reads it whole (``s = set(r); assert s <= allowed``, ``xs =
list(r)`` then ``all(is_prime(x) for x in xs)``: ``named_copies``; each passed the forged value):
``set``, ``frozenset``, ``list``, ``tuple`` or ``sorted`` of one argument so assigned.
"""

from __future__ import annotations

import ast

from polyrl.sandbox.named_copies import vacuously_read
from polyrl.sandbox.source_sites import Sites

#: The calls that make a set of their one argument.
_SETS = frozenset({"set", "frozenset"})
#: The calls whose copy of their one argument, bound to a name, the tests may check vacuously later.
_COPIES = _SETS | {"list", "tuple", "sorted"}
#: Methods of a set that hold over no items of their receiver (``issubset``, ``isdisjoint``) ...
_RECEIVER_CHECKS = frozenset({"issubset", "isdisjoint"})
#: ... or of their argument, which they read themselves.
_ARGUMENT_CHECKS = frozenset({"issuperset", "isdisjoint"})


def _subset_site(call: ast.Call, parents: dict[int, ast.AST]) -> ast.expr | None:
    """The call itself where it is a subset site: its place is the one ``set``/``issuperset`` runs at."""
    return call if subset_read(call, parents.get(id(call)), parents) else None


_SITES = Sites(_subset_site)
#: Take the tests' sources for ``subset_here`` (``Sites.register``).
register = _SITES.register


def subset_read(call: ast.Call, parent: ast.AST | None, parents: dict[int, ast.AST]) -> bool:
    """Whether ``call`` (its parent ``parent``) is a subset site (module doc)."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _ARGUMENT_CHECKS and len(call.args) == 1:
        return True  # ``allowed.issuperset(r)``: Python's method reads r from here
    if not (isinstance(func, ast.Name) and func.id in _COPIES and len(call.args) == 1 and not call.keywords):
        return False
    if vacuously_read(call, parents):  # ``s = set(r)``, then ``assert s <= allowed``
        return True
    if func.id not in _SETS:
        return False
    if isinstance(parent, ast.Attribute) and parent.attr in _RECEIVER_CHECKS:
        above = parents.get(id(parent))
        return isinstance(above, ast.Call) and above.func is parent
    if isinstance(parent, ast.Compare) and len(parent.ops) == 1:
        smaller = (ast.LtE, ast.Lt) if parent.left is call else (ast.GtE, ast.Gt)
        return isinstance(parent.ops[0], smaller)
    return False


def subset_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__iter__`` asking) is the tests'
    own code at a subset site (module doc)."""
    return _SITES.here(depth)
