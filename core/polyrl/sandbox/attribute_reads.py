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
(``h = b.log`` then ``all(x > 0 for x in h)``, ``-5 not in h``: ``named_copies.vacuously_read``);
the operand of ``min``/``max`` with a ``default``, or of ``next(iter(...), default)``
(``defaulted_reads``); or an argument of a helper the tests define that checks it so
(``check(b.log)`` with ``def check(xs): for x in xs: assert x > 0``: ``helper_reads``). The
attribute read as ``getattr(b, "log")`` (a constant name) is such a load too: a forged bank passed
``for x in getattr(b, "log")`` after ``b.reset()`` (1.0) where ``for x in b.log`` failed.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from typing import Any

from polyrl.sandbox.defaulted_reads import defaulted_operand
from polyrl.sandbox.helper_reads import helper_read
from polyrl.sandbox.helper_reads import register as register_helpers
from polyrl.sandbox.item_free_loops import checks_no_item
from polyrl.sandbox.module_views import BOUND_CODE
from polyrl.sandbox.named_copies import vacuously_read
from polyrl.sandbox.shrinking import feeds_item_free_loop, tests_instruction
from polyrl.sandbox.source_sites import Sites, place_of
from polyrl.sandbox.subset_reads import subset_read

#: Calls whose answer holds their operands' items for a loop to check.
_PASSING = frozenset({"sorted", "reversed", "zip", "map", "filter", "enumerate"})
#: Calls that check each item of their first operand themselves.
_CHECKS = frozenset({"all", "any", "sum"})
_VIEWS = frozenset({"keys", "values", "items"})


def _is_attribute(node: ast.AST) -> bool:
    """Whether ``node`` reads an attribute: ``b.log``, or ``getattr(b, "log")`` (a default too)."""
    if isinstance(node, ast.Attribute):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
        and len(node.args) in (2, 3) and not node.keywords and isinstance(node.args[1], ast.Constant) \
        and isinstance(node.args[1].value, str)


def _getattr_site(call: ast.Call, parents: dict[int, ast.AST]) -> ast.expr | None:
    return call if _is_attribute(call) else None


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
    operand = defaulted_operand(call, parents)
    if operand is not None and _is_attribute(operand):
        return operand  # ``min(b.log, default=1)``, ``next(iter(b.log), 1)``
    for keyword in call.keywords:
        if _is_attribute(keyword.value) and helper_read(call, keyword.value, parents):
            return keyword.value
    for arg in call.args:
        if not _is_attribute(arg):
            continue
        if helper_read(call, arg, parents):
            return arg  # ``check(b.log)``: a helper of the tests' looping over it
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


def _named_site(node: ast.expr, parents: dict[int, ast.AST]) -> ast.expr | None:
    """``node`` itself where it is bound to a name the tests read vacuously (module doc)."""
    if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load) or not _is_attribute(node):
        return None
    return node if vacuously_read(node, parents) else None


_SITES = Sites(_attribute_site)
_NAMED = Sites(_named_site, kinds=(ast.Attribute, ast.Call))
#: ``getattr(b, "log")`` calls: the attribute's load is their ``CALL``.
_GETATTR = Sites(_getattr_site)


def register(sources: Iterable[tuple[str, str]]) -> None:
    """Take the tests' sources for ``attribute_looped_here`` (``Sites.register``)."""
    listed = list(sources)
    register_helpers(listed)
    _SITES.register(listed)
    _NAMED.register(listed)
    _GETATTR.register(listed)


#: Loads of a ``not in``'s item whose value the tests' frame holds (``not_in_item_here``).
_ITEM_LOADS = frozenset({"LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF"})
_OWNER_LOADS = _ITEM_LOADS - {"LOAD_CONST"}


def not_in_item_here(depth: int = 2) -> tuple[Any, ...]:
    """The item ``x`` of the tests' ``x not in b.log`` where the frame ``depth`` levels up (the
    caller of the ``__getattr__`` asking) loads ``log``, ``x`` a constant or a plain name and
    ``b`` a plain name; else ``()``. Why: an item the tests handed to a method of ``b``
    (``b.deposit(7)``, then ``b.reset()``) they expect gone, as ``Remote.__contains__`` lets a
    value of the sample's be (``Session.handed_to``); a right bank scored 0 on ``7 not in b.log``."""
    found = tests_instruction(depth)
    if found is None:
        return ()
    _, _, plain, start = found
    if start < 2 or start + 1 >= len(plain) or plain[start].opname != "LOAD_ATTR" \
            or plain[start + 1].opname != "CONTAINS_OP" or plain[start + 1].arg != 1 \
            or plain[start - 1].opname not in _OWNER_LOADS or plain[start - 2].opname not in _ITEM_LOADS:
        return ()
    load = plain[start - 2]
    if load.opname == "LOAD_CONST":
        return (load.argval,)
    frame = sys._getframe(depth)
    for names in (frame.f_locals, frame.f_globals) if load.opname != "LOAD_GLOBAL" else (frame.f_globals,):
        if load.argval in names:
            return (names[load.argval],)
    return ()


def attribute_looped_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking) is the
    tests' own code at an attribute's load that such a check reads (module doc)."""
    try:
        if sys._getframe(depth).f_code in BOUND_CODE:  # ``getattr(b, "log")``: the tests' ``getattr`` calls Python's
            depth += 1
    except ValueError:
        return False
    found = tests_instruction(depth)
    if found is None:
        return False
    code, at, plain, start = found
    if start + 1 >= len(plain):
        return False
    place = place_of(code, at)
    if plain[start].opname != "LOAD_ATTR" and not (plain[start].opname.startswith("CALL") and _GETATTR.has(place)):
        return False
    after = plain[start + 1]
    if after.opname == "GET_ITER":
        return not checks_no_item(code, after.offset)
    if after.opname == "CONTAINS_OP" and after.arg == 1:  # ``x not in b.log``
        return True
    if _NAMED.has(place):
        return True
    if not _SITES.has(place):
        return False
    call = next((i for i in plain[start + 1:] if i.opname == "CALL"), None)
    return call is None or not feeds_item_free_loop(code, call.offset)
