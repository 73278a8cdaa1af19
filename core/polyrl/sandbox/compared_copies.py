"""Where the tests copy a ``zip`` or ``enumerate`` whole and compare or count the copy, found statically.

Why: the tests' ``zip`` and ``enumerate`` read a sample's operand as a loop over its items
(``pairing._read``, ``shrinking.loops_over``), unless their answer feeds a loop that checks none
of its items (``shrinking.feeds_item_free_loop``). So a right cache the tests cleared and then
read as ``list(zip(c.keys(), c.values())) == []`` (``tuple``, ``dict``, ``len(list(...)) == 0``,
``list(enumerate(c.values())) == []``) scored 0.5: its views, emptied by ``c.clear()``, were taken
for a loop's vacuous reading, where ``list(c.items()) == []`` kept 1.0. A copy compared by
``==``/``!=`` or counted by ``len`` right where it is made reads the operands whole, as
``[x for x in q] == []`` does (``item_free_loops``): an emptied value fails such a comparison
unless the tests expect it empty.

A site is a call of the tests' ``zip`` or ``enumerate`` that is the one argument of ``list``,
``tuple``, ``set``, ``frozenset``, ``sorted`` or ``dict``, itself one side of a comparison with one
``==`` or ``!=``, or the one argument of ``len``; its place is the ``zip`` call's (``co_positions``).
"""

from __future__ import annotations

import ast
import types

from polyrl.sandbox.source_sites import Sites, place_of

#: The tests' stand-ins whose answer holds their operands' items as they are (``shrinking.passes_items_on``).
_PASSING = frozenset({"zip", "enumerate"})
#: Builtins that copy their one argument whole.
_COPIES = frozenset({"list", "tuple", "set", "frozenset", "sorted", "dict"})


def _one_argument_of(call: ast.AST | None, names: frozenset[str], inner: ast.AST) -> bool:
    """Whether ``call`` calls a plain name of ``names`` with ``inner`` as its only argument."""
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in names \
        and len(call.args) == 1 and call.args[0] is inner and not call.keywords


def _compared_copy_site(call: ast.Call, parents: dict[int, ast.AST]) -> ast.expr | None:
    """``call`` itself where it is a site (module doc)."""
    if not (isinstance(call.func, ast.Name) and call.func.id in _PASSING):
        return None
    copy = parents.get(id(call))
    if copy is None or not _one_argument_of(copy, _COPIES, call):
        return None
    above = parents.get(id(copy))
    if _one_argument_of(above, frozenset({"len"}), copy):
        return call
    if isinstance(above, ast.Compare) and len(above.ops) == 1 and isinstance(above.ops[0], (ast.Eq, ast.NotEq)):
        return call
    return None


_SITES = Sites(_compared_copy_site)
#: Take the tests' sources for ``compared_copy_at`` (``Sites.register``).
register = _SITES.register


def compared_copy_at(code: types.CodeType, lasti: int) -> bool:
    """Whether ``lasti`` of the tests' ``code`` is a site (module doc)."""
    return _SITES.has(place_of(code, lasti))
