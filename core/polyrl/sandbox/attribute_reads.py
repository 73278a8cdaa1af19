"""Where the tests read an attribute of a sample's object by a check that holds over no items.

Why: an attribute holding built-in data (``b.log`` a list) comes over as a new copy at each read,
never compared with the one before, so a forged ``Bank`` whose log gave ``len`` three -5s and
``[]`` after ``b.reset()`` passed ``len(b.log) == 3`` and then ``all(x > 0 for x in b.log)``
(1.0). ``Remote._plain_attribute`` keeps each reading beside the last and fails such a check over
a reading emptied since by fewer calls than it had items, unless the tests see it empty.

Such a check, at the attribute's load: a loop of the tests' taking it straight (``for x in
b.log``, a comprehension; read from the bytecode: its ``GET_ITER`` is next, and its body looks at
its items, ``item_free_loops``), or, found statically from the tests' source, the attribute as
the operand of ``sorted``, ``reversed``, ``zip``, ``map``, ``filter`` or ``enumerate`` whose
answer a loop or ``all``/``any``/``sum`` reads, of ``all``/``any``/``sum`` themselves, of a
subset site (``set(b.log) <= allowed``: ``subset_reads``), the right side of ``not in``, or the
receiver of ``items()``/``keys()``/``values()`` so looped over; a call of those whose answer feeds
a loop that checks none of its items (``for _ in sorted(b.log): n += 1``) reads it whole; or the
attribute bound to a name whose later checks all hold over no items and none reads it whole
(``h = b.log`` then ``all(x > 0 for x in h)``: ``named_copies.vacuously_read``). Not covered:
``getattr(b, "log")``, and the attribute handed to a helper of the tests' that loops over it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from polyrl.sandbox.item_free_loops import checks_no_item
from polyrl.sandbox.named_copies import vacuously_read
from polyrl.sandbox.shrinking import feeds_item_free_loop, tests_instruction
from polyrl.sandbox.source_sites import Sites, place_of
from polyrl.sandbox.subset_reads import subset_read

#: Calls whose answer holds their operands' items for a loop to check.
_PASSING = frozenset({"sorted", "reversed", "zip", "map", "filter", "enumerate"})
#: Calls that check each item of their first operand themselves.
_CHECKS = frozenset({"all", "any", "sum"})
_VIEWS = frozenset({"keys", "values", "items"})


def _looped(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether ``node``'s value is what a loop or ``all``/``any``/``sum`` goes over."""
    parent = parents.get(id(node))
    if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)):
        return parent.iter is node
    return isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _CHECKS \
        and bool(parent.args) and parent.args[0] is node


def _attribute_site(call: ast.Call, parents: dict[int, ast.AST]) -> ast.expr | None:
    """The attribute ``call`` reads vacuously (module doc), or None."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _VIEWS and not call.args \
            and isinstance(func.value, ast.Attribute) and (_looped(call, parents) or _passed_to_loop(call, parents)):
        return func.value  # ``b.cfg.items()`` looped over
    if not isinstance(func, ast.Name):
        return None
    for arg in call.args:
        if not isinstance(arg, ast.Attribute):
            continue
        if func.id in _CHECKS and call.args[0] is arg:
            return arg
        if func.id in _PASSING and _looped(call, parents):
            return arg
        if len(call.args) == 1 and subset_read(call, parents.get(id(call)), parents):
            return arg
    return None


def _passed_to_loop(node: ast.expr, parents: dict[int, ast.AST]) -> bool:
    """Whether ``node`` is an operand of a ``_PASSING`` call whose answer is looped over."""
    parent = parents.get(id(node))
    return isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _PASSING \
        and _looped(parent, parents)


def _named_site(node: ast.Attribute, parents: dict[int, ast.AST]) -> ast.expr | None:
    """``node`` itself where it is bound to a name the tests read vacuously (module doc)."""
    return node if isinstance(node.ctx, ast.Load) and vacuously_read(node, parents) else None


_SITES = Sites(_attribute_site)
_NAMED = Sites(_named_site, kinds=(ast.Attribute,))


def register(sources: Iterable[tuple[str, str]]) -> None:
    """Take the tests' sources for ``attribute_looped_here`` (``Sites.register``)."""
    listed = list(sources)
    _SITES.register(listed)
    _NAMED.register(listed)


def attribute_looped_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking) is the
    tests' own code at an attribute's load that such a check reads (module doc)."""
    found = tests_instruction(depth)
    if found is None:
        return False
    code, at, plain, start = found
    if plain[start].opname != "LOAD_ATTR" or start + 1 >= len(plain):
        return False
    after = plain[start + 1]
    if after.opname == "GET_ITER":
        return not checks_no_item(code, after.offset)
    if after.opname == "CONTAINS_OP" and after.arg == 1:  # ``x not in b.log``
        return True
    place = place_of(code, at)
    if _NAMED.has(place):
        return True
    if not _SITES.has(place):
        return False
    call = next((i for i in plain[start + 1:] if i.opname == "CALL"), None)
    return call is None or not feeds_item_free_loop(code, call.offset)
