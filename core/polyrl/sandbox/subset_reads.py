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
which reads ``x`` from there. Not covered: a set bound to a name first (``s = set(r); assert s <=
allowed``), read as before.
"""

from __future__ import annotations

import ast
import itertools
import sys
import types
from collections.abc import Callable, Iterable

from polyrl.sandbox.tests_guard import TESTS_FILES

#: (filename, lineno, end_lineno, col_offset, end_col_offset) of a call, as ``co_positions`` gives it.
Place = tuple[str, int, int, int, int]
_SETS = frozenset({"set", "frozenset"})
#: Methods of a set that hold over no items of their receiver (``issubset``, ``isdisjoint``) ...
_RECEIVER_CHECKS = frozenset({"issubset", "isdisjoint"})
#: ... or of their argument, which they read themselves.
_ARGUMENT_CHECKS = frozenset({"issuperset", "isdisjoint"})
#: The sites of the tests now running (``register``), found the first time one is asked.
_sites: Callable[[], frozenset[Place]] = frozenset


def register(sources: Iterable[tuple[str, str]]) -> None:
    """Take the tests' sources ((filename, text) as ``harness.run_tests`` compiles them) for ``subset_here``."""
    global _sites
    found: list[frozenset[Place]] = []
    listed = list(sources)

    def sites() -> frozenset[Place]:
        if not found:
            found.append(subset_sites(listed))
        return found[0]

    _sites = sites


def subset_sites(sources: Iterable[tuple[str, str]]) -> frozenset[Place]:
    """The places of the subset sites of ``sources`` (module doc); sources that do not parse add none."""
    places: set[Place] = set()
    for filename, text in sources:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _subset_read(node, parents.get(id(node)), parents) \
                    and node.end_lineno is not None and node.end_col_offset is not None:
                places.add((filename, node.lineno, node.end_lineno, node.col_offset, node.end_col_offset))
    return frozenset(places)


def _subset_read(call: ast.Call, parent: ast.AST | None, parents: dict[int, ast.AST]) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _ARGUMENT_CHECKS and len(call.args) == 1:
        return True  # ``allowed.issuperset(r)``: Python's method reads r from here
    if not (isinstance(func, ast.Name) and func.id in _SETS and len(call.args) == 1 and not call.keywords):
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
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    return place_of(frame.f_code, frame.f_lasti) in _sites()


def place_of(code: types.CodeType, lasti: int) -> Place | None:
    """Where ``lasti`` of the tests' ``code`` is, or None (not theirs; before Python 3.11)."""
    positions = getattr(code, "co_positions", None)
    if positions is None or code.co_filename not in TESTS_FILES or lasti < 0:
        return None
    position = next(itertools.islice(positions(), lasti // 2, None), None)
    if position is None or None in position:
        return None
    return (code.co_filename, *position)
