"""Where the tests compare a ``len`` only with constants that give the same answer for every count, found statically.

Why: ``len(r)`` reads a sample's value whole (``Remote._check_count``), and a whole reading that
finds it empty is the tests seeing it empty, which lets a later loop over it pass
(``Remote._emptied_unseen``). A forged ``primes`` giving three 4s to ``len`` and nothing after
``r.reset()`` passed ``len(r) == 3``, then ``assert len(r) >= 0`` and ``all(is_prime(x) for x in
r)`` (1.0): ``>= 0`` holds for any count, so the tests saw nothing of it. Such a count is no
reading of theirs now; one that some count would fail (``len(r) == 0``, ``len(r) < 2``, ``0 <=
len(r) <= 3``), or compared with anything but constants (``len(r) == n``), or read otherwise
(``not len(r)``, ``n = len(r)``) still is.

A site is a call of ``len`` with one argument that is an operand of a comparison whose other
operands are all literals (``0``, ``-1``, ``None``, ``(-1, -2)``) and whose answer is the same for
every count 0, 1, 2, ... (``>= 0``, ``> -1``, ``!= -1``, ``is not None``, ``< 0``, ``not in
(-1,)``); its places are the ``len`` call and each node from its argument down to the value it
reads (``self_compared.read_chain``: ``len(list(r)) >= 0``, ``len(b.log) >= 0``).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from polyrl.sandbox.self_compared import read_chain
from polyrl.sandbox.source_sites import Sites

#: A comparison's operator -> what it answers of (left, right), as Python does for a count and a literal.
_ANSWERS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Is: lambda a, b: type(a) is type(b) and a == b,  # ints alike are one object, as small ones are
    ast.IsNot: lambda a, b: not (type(a) is type(b) and a == b),
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
#: Literals within a literal looked into for the counts where an answer may change (``_counts_to_try``).
_NESTED = (tuple, list, set, frozenset)


def _literal(node: ast.expr) -> tuple[bool, Any]:
    """(True, its value) where ``node`` is a literal (``-1`` too); (False, None) otherwise."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _numbers(value: Any, depth: int = 0) -> list[int | float]:
    """The finite numbers in a literal, nested up to 4 deep."""
    if isinstance(value, int):  # a bool too: ``True`` is 1
        return [value]
    if isinstance(value, float):
        return [value] if math.isfinite(value) else []
    if depth < 4 and isinstance(value, _NESTED):
        return [n for item in value for n in _numbers(item, depth + 1)]
    if depth < 4 and isinstance(value, dict):
        return [n for key in value for n in _numbers(key, depth + 1)]
    return []


def _counts_to_try(literals: list[Any]) -> list[int]:
    """Counts that reach every answer a comparison with ``literals`` may give: its answer changes
    only beside a number among them, so 0, 1, each number's neighbours, and one past them all."""
    near = [0, 1]
    for number in (n for value in literals for n in _numbers(value)):
        if abs(number) < 1 << 62:
            base = math.floor(number)
            near.extend(c for c in range(base - 1, base + 3) if c >= 0)
    return sorted(set(near)) + [max(near) + (1 << 20)]


def _same_for_every_count(compare: ast.Compare, index: int) -> bool:
    """Whether ``compare``, whose operand ``index`` is the count, answers alike for every count,
    its other operands all literals."""
    operands = [compare.left, *compare.comparators]
    literals: list[Any] = []
    for i, node in enumerate(operands):
        if i == index:
            continue
        ok, value = _literal(node)
        if not ok:
            return False
        literals.append(value)
    answers = set()
    for count in _counts_to_try(literals):
        values = [*literals[:index], count, *literals[index:]]
        try:
            answer = all(bool(_ANSWERS[type(op)](values[i], values[i + 1])) for i, op in enumerate(compare.ops))
        except Exception:  # noqa: BLE001 - ``len(r) < "a"`` raises for every count: no answer to read
            return False
        answers.add(answer)
        if len(answers) > 1:
            return False
    return True


def _vacuous_count_site(node: ast.expr, parents: dict[int, ast.AST]) -> ast.expr | None:
    """``node`` itself where it is one of a site's places (module doc)."""
    call: ast.AST = node
    while not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "len"):
        above = parents.get(id(call))
        if above is None or isinstance(above, (ast.Compare, ast.stmt)):
            return None
        call = above
    if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
        return None
    if node is not call and not any(node is n for n in read_chain(call.args[0])[1]):
        return None
    compare = parents.get(id(call))
    if not isinstance(compare, ast.Compare):
        return None
    operands = [compare.left, *compare.comparators]
    index = next(i for i, operand in enumerate(operands) if operand is call)
    return node if _same_for_every_count(compare, index) else None


_SITES = Sites(_vacuous_count_site, kinds=(ast.Attribute, ast.Call, ast.Name, ast.ListComp, ast.SetComp,
                                           ast.GeneratorExp))
#: Take the tests' sources for ``counted_vacuously_above`` and ``counted_vacuously_here`` (``Sites.register``).
register = _SITES.register


def counted_vacuously_above(limit: int = 12) -> bool:
    """Whether the nearest frame above this call that is the tests' own code (at most ``limit``
    up) stands at a site: ``len(r) >= 0`` reaches ``__len__`` through the tests' ``len``."""
    return _SITES.above(limit)


def counted_vacuously_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking:
    ``len(b.log) >= 0``) is the tests' own code at a site."""
    return _SITES.here(depth)
