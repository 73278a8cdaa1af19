"""Where the tests read a value through a builtin whose default stands in for its items, found statically.

Why: ``min(r, default=2)``, ``max(r, default=2)`` and ``next(iter(r), 2)`` answer their default
when ``r`` is empty, so such a check holds over no items as a loop does. A forged ``primes``
emptied by ``r.reset()`` (or a forged bank's ``b.log`` emptied so) passed ``len(r) == 3`` and then
``assert is_prime(min(r, default=2))`` (1.0): the builtin's read of ``r`` was taken for a whole
reading. Such a read is the tests' loop over it now (``Remote._emptied_unseen``,
``Remote._plain_attribute``): emptied since its last whole reading, it fails unless the tests see
it empty, before or after.

A site is a call of ``min`` or ``max`` with one argument and a ``default`` keyword (its place:
the call's), or ``iter(x)`` as the first of ``next``'s two arguments (its place: ``iter``'s);
its operand is ``x``. Not one where the answer is compared (``==``, ``is``) with a ``None``
default (``next(iter(r), None) is None``): the tests check it empty there.
"""

from __future__ import annotations

import ast

from polyrl.sandbox.source_sites import Sites

_EXTREMES = frozenset({"min", "max"})


def _named_call(node: ast.AST | None, names: frozenset[str]) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _checked_against(call: ast.expr, default: ast.expr, parents: dict[int, ast.AST]) -> bool:
    """Whether ``call``'s answer is compared by ``==`` or ``is`` with ``default`` itself, ``None``:
    the tests ask whether it is empty (any other default is an answer an item may give too:
    ``next(iter(r), 2) == 2`` passed a forged ``primes`` emptied under it)."""
    if not (isinstance(default, ast.Constant) and default.value is None):
        return False
    parent = parents.get(id(call))
    if not (isinstance(parent, ast.Compare) and len(parent.ops) == 1 and isinstance(parent.ops[0], (ast.Eq, ast.Is))):
        return False
    other = parent.comparators[0] if parent.left is call else parent.left
    return _same(other, default)


def defaulted_operand(call: ast.Call, parents: dict[int, ast.AST]) -> ast.expr | None:
    """The operand ``call`` reads at a site (module doc), or None."""
    if _named_call(call, _EXTREMES) and len(call.args) == 1:
        default = next((k.value for k in call.keywords if k.arg == "default"), None)
        if default is None or len(call.keywords) > 2 or _checked_against(call, default, parents):
            return None
        return call.args[0]
    if not (_named_call(call, frozenset({"iter"})) and len(call.args) == 1 and not call.keywords):
        return None
    outer = parents.get(id(call))
    if not (_named_call(outer, frozenset({"next"})) and isinstance(outer, ast.Call) and len(outer.args) == 2
            and outer.args[0] is call and not outer.keywords):
        return None
    return None if _checked_against(outer, outer.args[1], parents) else call.args[0]


_SITES = Sites(lambda call, parents: call if defaulted_operand(call, parents) is not None else None)
#: Take the tests' sources for ``defaulted_here`` (``Sites.register``).
register = _SITES.register


def defaulted_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__iter__`` asking) is the tests'
    own code at a site (module doc)."""
    return _SITES.here(depth)
