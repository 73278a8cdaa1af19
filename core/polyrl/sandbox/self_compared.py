"""Where the tests compare a reading with another reading of the same expression, found statically.

Why: ``b.log == b.log`` (or ``list(r) == list(r)``) holds whatever the value holds, yet it read
the value whole, and a whole reading that finds a value empty is the tests seeing it empty
(``Remote._plain_attribute``), which lets a later loop over it pass. A forged ``Bank`` whose log
gave ``len`` three -5s and ``[]`` after ``b.reset()`` passed ``len(b.log) == 3``, then ``assert
b.log == b.log`` and ``all(x > 0 for x in b.log)`` (1.0). Such a reading tells the tests nothing
of its items: it is no reading of theirs at all now.

Two readings of one value compared with each other are the same (``len(set(r)) == len(list(r))``,
``sorted(r) == [x for x in r]``, ``sorted(r, key=abs) == list(r)``): over no items they hold too.
So does one compared with its items passed through a function or filter of the tests'
(``[(lambda: x)() for x in r] == [x for x in r]``, ``list(map(f, r)) == list(r)``, ``[x for x in r
if x > 1] == list(r)``), which passed a forged ``primes`` emptied by ``r.reset()`` (1.0): its
plain copy saw the value empty. A site is a comparison with one ``==``, ``!=``, ``is`` or ``is
not`` whose sides read the same expression (``ast.dump``, no literal) under builtins made of its
items alone (``len``, ``list``, ``set``, ``sorted`` with a key or not, ...), a comprehension over it
or ``map``/``filter`` of it (``read_chain``); its places are each node from a side that holds the
items as they are (those builtins, a comprehension copying them item by item) down to that
expression. ``Remote._snapshot`` keeps no reading of a sample's value made there either. A side
through a function or filter of the tests' is no place: it is their loop over the items
(``shrinking.looped_here``), which an emptied value fails unless the tests see it empty otherwise.

That holds of a side whose comprehension looks at no item too (``[1 for x in r] == list(r)``,
``len([1 for x in r]) == len(list(r))``, ``sum(1 for _ in r) == len(r)``, ``[1 for x in r] == [1]
* len(r)``): alone such a loop counts the items (``item_free_loops``: a whole reading), but here
its answer is compared with another reading of the same items, which over no items it equals, so
a forged ``primes`` emptied by ``r.reset()`` passed each and then a loop over no items (1.0). Its
``GET_ITER`` is their loop now (``compared_loop_at``). ``sum`` of a reading, and a reading with a
constant through an operator (``[1] * len(r)``, ``len(r) + 1``, ``-len(r)``), are made of its
items (or their count) as well. One computed from counts of the value alone that some count
changes is no site (``vacuous_counts.changes_with_the_count``): ``len({0 for x in q}) == len(q)``
holds for 0 or 1 items only, so a right queue the tests clear and check so then loop over scored 0.67.
"""

from __future__ import annotations

import ast
import types
from typing import Any

from polyrl.sandbox.source_sites import Place, Sites, place_of

_SAME = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
#: Builtins whose answer, of one argument, is made of that argument's items alone (or their count).
_WRAPPERS = frozenset({"len", "list", "tuple", "set", "frozenset", "sorted", "reversed", "iter", "dict"})
_COPIES = (ast.ListComp, ast.SetComp, ast.GeneratorExp)
#: Builtins whose answer, of a function and one operand, is made of that operand's items through the function.
_MAPPING = frozenset({"map", "filter"})


def _step(node: ast.expr) -> tuple[ast.expr | None, bool]:
    """The operand whose items ``node`` is made of, and whether it holds them as they are (a
    wrapper, ``[x for x in r]``) rather than through a function or filter of the tests'
    (``[f(x) for x in r]``, ``[x for x in r if x]``, ``map(f, r)``); (None,
    False) where it is made of no one operand's items."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and not any(isinstance(arg, ast.Starred) for arg in node.args):
        name, keywords = node.func.id, {k.arg for k in node.keywords}
        if name in _WRAPPERS and len(node.args) == 1 and not keywords:
            return node.args[0], True
        if name == "sorted" and len(node.args) == 1 and keywords <= {"key", "reverse"}:
            return node.args[0], True  # its items alone, in another order
        if name in _MAPPING and len(node.args) == 2 and not keywords:
            return node.args[1], False
        if name == "sum" and len(node.args) == 1 and not keywords:  # its own check of each item: a loop
            return node.args[0], False
    if isinstance(node, ast.BinOp):  # ``[1] * len(r)``, ``len(r) + 1``: the count with a constant
        left, right = literal(node.left)[0], literal(node.right)[0]
        if left != right:
            return (node.right if left else node.left), True
    if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
        return node.operand, True
    if isinstance(node, _COPIES) and len(node.generators) == 1 and not node.generators[0].is_async:
        generator = node.generators[0]
        copies = not generator.ifs and isinstance(node.elt, ast.Name) and isinstance(generator.target, ast.Name) \
            and node.elt.id == generator.target.id
        return generator.iter, copies
    return None, False


def literal(node: ast.expr) -> tuple[bool, Any]:
    """(True, its value) where ``node`` is a literal (``1``, ``[1]``, ``-1``); (False, None) otherwise."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def read_chain(side: ast.expr) -> tuple[ast.expr, list[ast.expr], bool]:
    """The value ``side`` reads under its wrappers (``len(set(r))``, ``[x for x in r]``,
    ``[f(x) for x in r]``: ``r``), every node from ``side`` down to it, and whether each of them
    holds its items as they are (``_step``)."""
    chain, plain = [side], True
    while True:
        inner, copies = _step(chain[-1])
        if inner is None:
            return chain[-1], chain, plain
        chain.append(inner)
        plain = plain and copies


def _compared_sides(node: ast.expr, parents: dict[int, ast.AST]) \
        -> tuple[tuple[ast.expr, list[ast.expr], bool], ...] | None:
    """The two sides (``read_chain``'s) of the site ``node`` is part of (module doc), or None."""
    above: ast.AST = node
    while True:  # up through the wrappers to the comparison
        parent = parents.get(id(above))
        if isinstance(parent, ast.Compare):
            break
        if parent is None or not isinstance(parent, (ast.Call, ast.comprehension, ast.BinOp, ast.UnaryOp, *_COPIES)):
            return None
        above = parent
    if len(parent.ops) != 1 or not isinstance(parent.ops[0], _SAME):
        return None
    sides = read_chain(parent.left), read_chain(parent.comparators[0])
    if isinstance(sides[0][0], (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict)) \
            or ast.dump(sides[0][0]) != ast.dump(sides[1][0]):
        return None
    # imported here: ``vacuous_counts`` reads literals and chains with this module's helpers
    from polyrl.sandbox.vacuous_counts import changes_with_the_count
    return None if changes_with_the_count(parent) else sides


def _self_compared_site(node: ast.expr, parents: dict[int, ast.AST]) -> ast.expr | None:
    """``node`` itself where it is a site's place (module doc)."""
    sides = _compared_sides(node, parents)
    if sides is None:
        return None
    return node if any(node is n for _, chain, plain in sides if plain for n in chain) else None


def _compared_loop(node: ast.expr, parents: dict[int, ast.AST]) -> ast.expr | None:
    """``node`` itself where it is a comprehension on a site's side that takes the items through
    something of the tests' (``[1 for x in r]``, ``[f(x) for x in r]``; not ``[x for x in r]``)."""
    if _step(node)[1]:
        return None
    sides = _compared_sides(node, parents)
    if sides is None:
        return None
    return node if any(node is n for _, chain, _ in sides for n in chain) else None


_SITES = Sites(_self_compared_site, kinds=(ast.Attribute, ast.Call, ast.Name, *_COPIES))
_LOOPS = Sites(_compared_loop, kinds=_COPIES)


def register(sources: list[tuple[str, str]]) -> None:
    """Take the tests' sources for ``self_compared_here`` and ``compared_loop_at`` (``Sites.register``)."""
    _SITES.register(sources)
    _LOOPS.register(sources)


def compared_loop_at(code: types.CodeType, get_iter: int) -> bool:
    """Whether the ``GET_ITER`` at offset ``get_iter`` of the tests' ``code`` starts a
    comprehension of ``_compared_loop``'s: a loop that checks each item, whatever its body."""
    place: Place | None = place_of(code, get_iter)
    return _LOOPS.has(place)


def self_compared_above(limit: int = 12) -> bool:
    """Whether the nearest frame above this call that is the tests' own code (at most ``limit``
    up) stands at a site: a sample's value read whole by ``list(r) == list(r)`` reaches its
    ``_snapshot`` through ``__len__`` or ``__iter__``, at more than one depth."""
    return _SITES.above(limit)


def self_compared_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking) is the
    tests' own code at a site (module doc)."""
    return _SITES.here(depth)
