"""Where the tests compute from a ``len`` only what every count answers alike, found statically.

Why: ``len(r)`` reads a sample's value whole (``Remote._check_count``), and a whole reading that
finds it empty is the tests seeing it empty, which lets a later loop over it pass
(``Remote._emptied_unseen``). A forged ``primes`` giving three 4s to ``len`` and nothing after
``r.reset()`` passed ``len(r) == 3``, then ``assert len(r) >= 0`` and ``all(is_prime(x) for x in
r)`` (1.0); so it did with ``len(r) + 1 > 0``, ``abs(len(r)) >= 0``, ``-len(r) <= 0`` or ``len(r)
== 0 or True``: each holds for any count, so the tests saw nothing of it. Such a count is no
reading of theirs now; one whose answer some count changes (``len(r) == 0``, ``len(r) > 0``,
``0 <= len(r) <= 3``, ``len(r) % 2 == 0``), or computed with anything but constants (``len(r) ==
n``), or read otherwise (``not len(r)``, ``n = len(r)``) still is.

A site is a call of ``len`` with one argument inside an expression around it made of
constants, that count (``len`` of the same argument, by ``ast.dump``) and operators, comparisons,
``and``/``or``/``not``, ``x if c else y`` and the builtins ``abs``, ``int``, ``float``, ``bool``,
``round``, ``min``, ``max``, ``pow`` (where the tests bind no such name of their own), whose
answer is the same for every count tried (``_counts_to_try``); one that raises, or computes a
number past 2**512, is none. Its places are the ``len`` call and each node from its argument down
to the value it reads (``self_compared.read_chain``: ``len(list(r)) >= 0``, ``len(b.log) >= 0``).

A ``len`` of a comprehension whose items are one value whatever the item (a literal, or a name
the tests bind other than its target; one plain loop, no ``if``) counts the value it loops over
(``measured``): ``len([0 for x in r])`` and ``len(list(y for _ in r))`` are ``len(r)``, ``len({0
for x in r})``, ``len(set(0 for x in r))`` and ``len({0: y for x in r})`` are it capped at one.
A forged ``primes`` emptied by ``r.reset()`` passed ``len({0 for x in r}) <= len(r)`` (or ``len({1
for _ in r}) < 2``) and then the loop over no items (1.0): each holds for any count. So it did
``y = 0`` then ``len({y for _ in r}) <= len(r)``: a set's item may be a name too where every
binding of it in the tests is one hashable literal (``_bound_names``). ``len({x: 0 for x in r})``
reads whether the items repeat, ``{y for _ in r}`` raises where ``y`` is unhashable (``y = []``,
or ``y = r[0]`` of a sample whose items are lists) and ``for a, b in r`` where an item is no
pair, so each of those is a count of its own. Yet a ``y`` bound otherwise may be hashable: a
forged ``primes`` passed ``y = r[0]`` (or ``y = 1 + 1``), ``r.reset()``, then ``len({y for _ in
r}) <= len(r)`` and the loop (1.0). Such a place is a site where each such name's value, when
the count is read there, is not surely unhashable (``_count_vacuous``, ``_hashable_at``). A comparison of such counts of one value that some
count changes (``len({0 for x in q}) == len(q)``: 0 or 1 items only) is no two readings alike to
``self_compared`` either (``changes_with_the_count``).
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from polyrl.sandbox.module_views import BOUND_CODE
from polyrl.sandbox.self_compared import literal, read_chain
from polyrl.sandbox.source_sites import Place, Sites, parsed, place_of
from polyrl.sandbox.tests_guard import TESTS_FILES

#: A comparison's operator -> what it answers of (left, right), as Python does for a count and a literal.
_ANSWERS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Is: lambda a, b: type(a) is type(b) and a == b,  # ints alike are one object, as small ones are
    ast.IsNot: lambda a, b: not (type(a) is type(b) and a == b),
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
#: Arithmetic on numbers (``len(r) + 1``); ``**`` and ``<<`` go through ``_power``/``_shift``.
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}
#: Builtins of numbers whose answer is a number again (``abs(len(r))``); ``pow`` as ``**``.
_BUILTINS: dict[str, Callable[..., Any]] = {
    "abs": abs, "int": int, "float": float, "bool": bool, "round": round, "min": min, "max": max}
#: Past this a computed number is no answer read here (``len(r) ** 10 ** 9`` is not computed).
_LARGEST = 1 << 512
#: Literals within a literal looked into for the counts where an answer may change (``_counts_to_try``).
_NESTED = (tuple, list, set, frozenset)
#: Per ``len`` call (by ``id``, the call kept): whether it is a site (``_count_vacuous``: True, False,
#: or the names it is one where each is hashable at run time), for each place along its argument.
_DECIDED: dict[int, tuple[ast.AST, bool | frozenset[str]]] = {}
#: The names the tests bind, each with whether every binding of it is one hashable literal (``_bound_names``).
Bound = Mapping[str, bool]
#: Those of the tests now running, in all their sources (``register``); they shadow ``_BUILTINS``.
_bound: Callable[[], Bound] = dict


class _Assumed(dict[str, bool]):
    """``Bound`` where every name the tests bind is taken for one hashable value, recording
    those of them asked so (``_hashable_value``) that are not: what ``{y for _ in r}`` holds
    at most one item of only where ``y``'s value at run time is hashable (``_count_vacuous``)."""

    def __init__(self, bound: Bound) -> None:
        super().__init__(dict.fromkeys(bound, True))
        self.real = bound
        self.asked: set[str] = set()

    def hashable(self, name: str) -> bool:
        if name in self and not self.real.get(name, False):
            self.asked.add(name)
        return name in self


#: Builtins that keep each item of a comprehension (``len(list(0 for _ in r))`` is ``len(r)``) and
#: that keep each distinct one once (``len(set(0 for _ in r))`` is 0 or 1).
_KEEPING = frozenset({"list", "tuple"})
_DISTINCT = frozenset({"set", "frozenset"})


def _hashable_literal(node: ast.expr) -> bool:
    """Whether ``node`` is a literal a set or dict may hold (``0``, ``(1, 2)``; not ``[]``)."""
    ok, value = literal(node)
    if not ok:
        return False
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _outer_value(node: ast.expr, target: str, bound: Bound) -> bool:
    """Whether ``node`` evaluates, without raising, to the same value for every item: a literal, or
    a name other than the loop's ``target`` that the tests bind or a builtin is."""
    return literal(node)[0] or (isinstance(node, ast.Name) and node.id != target
                                and (node.id in bound or hasattr(builtins, node.id)))


def _hashable_value(node: ast.expr, target: str, bound: Bound) -> bool:
    """Whether ``node`` is one value a set or dict may hold for every item: a hashable literal, or a
    name other than ``target`` that the tests bind only to such literals (``y = 0``; not ``y = []``,
    ``y = r[0]``: an item of the sample's may be unhashable, and ``{y for _ in r}`` raises then)."""
    if not isinstance(node, ast.Name) or node.id == target:
        return _hashable_literal(node)
    return bound.hashable(node.id) if isinstance(bound, _Assumed) else bound.get(node.id, False)


def _plain_loop(node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> str | None:
    """The target name of ``node``'s one loop where it takes every item once and unpacks none
    (no ``if``, not async: ``for a, b in r`` fails on items that are no pairs), else None."""
    if len(node.generators) != 1:
        return None
    loop = node.generators[0]
    return loop.target.id if isinstance(loop.target, ast.Name) and not loop.ifs and not loop.is_async else None


def _items(node: ast.expr, bound: Bound) -> tuple[list[ast.expr], bool, bool] | None:
    """Where ``node``'s items are those of a value it loops over, each one value whatever the item:
    the nodes from ``node`` down to that value, whether it holds at most one item (a set or dict
    of one hashable value, ``_hashable_value``), and whether each item is one hashable value; else None."""
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        target = _plain_loop(node)
        if target is None:
            return None
        if isinstance(node, ast.DictComp):  # its items are its keys
            found = _hashable_value(node.key, target, bound) and _outer_value(node.value, target, bound)
            return ([node, node.generators[0].iter], True, True) if found else None
        constant = _hashable_value(node.elt, target, bound)
        if not constant and (isinstance(node, ast.SetComp) or not _outer_value(node.elt, target, bound)):
            return None  # ``y = []``, ``{y for _ in r}``: raises where ``r`` has items
        return [node, node.generators[0].iter], isinstance(node, ast.SetComp), constant
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _KEEPING | _DISTINCT \
            and node.func.id not in bound and len(node.args) == 1 and not node.keywords:
        inner = _items(node.args[0], bound)  # a starred argument is no comprehension: None
        if inner is None:
            return None
        chain, single, constant = inner
        if node.func.id in _DISTINCT and not constant:
            return None
        return [node, *chain], single or node.func.id in _DISTINCT, constant
    return None


def measured(argument: ast.expr, bound: Bound) -> tuple[list[ast.expr], bool]:
    """The nodes from ``argument`` down to the value whose count ``len(argument)`` is computed from
    (the last), and whether it is that count capped at one: ``len({0 for x in r})`` and ``len(set(0
    for x in r))`` are 0 or 1 as ``r`` holds items or none, ``len([0 for x in r])`` is ``len(r)``;
    ``len({x: 0 for x in r})`` reads whether items repeat, so it is a count of its own (and ``len``
    of a generator raises, whatever it loops over)."""
    found = None if isinstance(argument, ast.GeneratorExp) else _items(argument, bound)
    return ([argument], False) if found is None else found[:2]


class _NoAnswer(Exception):
    """The expression is not one computed here (a name, a call of the tests', a number too large)."""


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


def _counts_to_try(numbers: list[int | float]) -> list[int]:
    """Counts that reach the answers an expression with ``numbers`` may give: every count to 512,
    each power of two to 2**62 and its neighbours, and the neighbours of each number, of each
    pair's sum, difference, product and quotient (``len(r) * 3 > 1000`` changes at 334)."""
    near = set(range(513))
    near.update(c for k in range(10, 63) for c in ((1 << k) - 1, 1 << k, (1 << k) + 1))
    found = [n for n in numbers if abs(n) < 1 << 62][:24]
    derived = list(found)
    for a in found:
        for b in found:
            derived.extend((a + b, a - b, a * b))
            if b:
                derived.append(a / b)
    for number in derived:
        if abs(number) < 1 << 62:
            base = math.floor(number)
            near.update(c for c in range(base - 1, base + 3) if c >= 0)
    return sorted(near)


def _checked(value: Any) -> Any:
    """``value``, where it is a number small enough to go on with (or a bool, None)."""
    if isinstance(value, int) and abs(value) >= _LARGEST:
        raise _NoAnswer
    return value


def _number(value: Any) -> int | float:
    """``value`` where arithmetic may take it: a number (a bool too), not a literal str or tuple."""
    if not isinstance(value, (int, float)):
        raise _NoAnswer
    return value


def _power(base: Any, exponent: Any) -> Any:
    """``base ** exponent``, computed only where its size stays small (``_LARGEST``)."""
    base, exponent = _number(base), _number(exponent)
    if isinstance(exponent, int) and abs(exponent) > 512 and abs(base) > 1:
        raise _NoAnswer
    return base ** exponent


def _shift(value: Any, by: Any) -> Any:
    """``value << by``, computed only where ``by`` is small."""
    value, by = _number(value), _number(by)
    if not isinstance(by, int) or by > 512:
        raise _NoAnswer
    return operator.lshift(value, by)


def _bound_names(tree: ast.AST) -> dict[str, bool]:
    """The names ``tree``'s code binds anywhere (assigned, defined, imported, a parameter, caught,
    matched), each with whether every binding of it is ``name = <hashable literal>`` outside a
    class body (``{y for _ in r}`` of ``y = 0`` holds one item at most; a class's ``y`` is no name
    its comprehensions see)."""
    names: dict[str, bool] = {}
    plain: set[int] = set()  # the ``Name`` targets of such assignments, by ``id``
    in_class: set[int] = set()  # the statements of class bodies, by ``id``

    def bind(name: str | None, hashable: bool = False) -> None:
        if name is not None:
            names[name] = names.get(name, True) and hashable

    for node in ast.walk(tree):  # breadth first: a statement comes before its targets
        if isinstance(node, ast.ClassDef):
            in_class.update(id(statement) for statement in node.body)
        if isinstance(node, ast.Assign) and id(node) not in in_class and _hashable_literal(node.value):
            plain.update(id(target) for target in node.targets if isinstance(target, ast.Name))
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bind(node.id, id(node) in plain)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):  # ``builtins.abs = f``
            bind(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name)
        elif isinstance(node, ast.alias):
            bind(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.arg):
            bind(node.arg)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            bind(node.name)
        elif isinstance(node, ast.MatchMapping):
            bind(node.rest)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bind(name)
    return names


class _Count:
    """Computes an expression of one count (of ``argument``, by ``ast.dump``, as ``measured``) and constants."""

    def __init__(self, argument: str, shadowed: Bound) -> None:
        self._argument = argument
        self._shadowed = shadowed
        self._literals: dict[int, tuple[bool, Any]] = {}  # by node ``id``: each parsed once
        self._capped: dict[int, bool | None] = {}  # by ``len`` call ``id``: ``_counted``'s answer

    def literal(self, node: ast.expr) -> tuple[bool, Any]:
        """``self_compared.literal(node)``, kept."""
        found = self._literals.get(id(node))
        if found is None:
            found = self._literals[id(node)] = literal(node)
        return found

    def _counted(self, node: ast.expr) -> bool | None:
        """Where ``node`` is ``len`` of an argument ``measured`` down to the value counted here,
        whether its answer is that count capped at one; None where it is not."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"
                and "len" not in self._shadowed and len(node.args) == 1 and not node.keywords
                and not isinstance(node.args[0], ast.Starred)):
            return None
        if id(node) not in self._capped:
            chain, capped = measured(node.args[0], self._shadowed)
            self._capped[id(node)] = capped if ast.dump(chain[-1]) == self._argument else None
        return self._capped[id(node)]

    def counts(self, node: ast.expr) -> bool:
        """Whether ``node`` is ``len`` of the value counted here (``measured``)."""
        return self._counted(node) is not None

    def takes(self, node: ast.expr) -> bool:
        """Whether ``node`` is made of that count and constants alone, in forms ``value`` computes."""
        if self.counts(node) or self.literal(node)[0]:
            return True
        if isinstance(node, ast.BinOp):
            return (type(node.op) in _BINARY or isinstance(node.op, (ast.Pow, ast.LShift))) \
                and self.takes(node.left) and self.takes(node.right)
        if isinstance(node, ast.UnaryOp):
            return type(node.op) in _UNARY and self.takes(node.operand)
        if isinstance(node, ast.Compare):
            return all(type(op) in _ANSWERS for op in node.ops) \
                and all(self.takes(n) for n in (node.left, *node.comparators))
        if isinstance(node, ast.BoolOp):
            return all(self.takes(n) for n in node.values)
        if isinstance(node, ast.IfExp):
            return self.takes(node.test) and self.takes(node.body) and self.takes(node.orelse)
        if isinstance(node, ast.Call):
            return isinstance(node.func, ast.Name) and node.func.id in (*_BUILTINS, "pow") \
                and node.func.id not in self._shadowed and not node.keywords \
                and all(not isinstance(a, ast.Starred) and self.takes(a) for a in node.args)
        return False

    def value(self, node: ast.expr, count: int) -> Any:
        """``node``'s answer where the count is ``count`` (``takes`` holds of it)."""
        capped = self._counted(node)
        if capped is not None:
            return min(count, 1) if capped else count
        ok, literal = self.literal(node)
        if ok:
            return literal
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left, count), self.value(node.right, count)
            if isinstance(node.op, ast.Pow):
                return _checked(_power(left, right))
            if isinstance(node.op, ast.LShift):
                return _checked(_shift(left, right))
            return _checked(_BINARY[type(node.op)](_number(left), _number(right)))
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand, count)
            return _UNARY[type(node.op)](operand if isinstance(node.op, ast.Not) else _number(operand))
        if isinstance(node, ast.Compare):
            left = self.value(node.left, count)
            for op, comparator in zip(node.ops, node.comparators):
                right = self.value(comparator, count)
                if not _ANSWERS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.BoolOp):
            answer: Any = None
            for operand in node.values:
                answer = self.value(operand, count)
                if bool(answer) is isinstance(node.op, ast.Or):
                    return answer
            return answer
        if isinstance(node, ast.IfExp):
            return self.value(node.body if self.value(node.test, count) else node.orelse, count)
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        args = [self.value(a, count) for a in node.args]
        if node.func.id == "pow":
            if len(args) != 2:
                raise _NoAnswer
            return _checked(_power(*args))
        return _checked(_BUILTINS[node.func.id](*args))


def _same_for_every_count(top: ast.expr, count: _Count) -> bool:
    """Whether ``top`` (``count.takes`` holds of it) answers alike for every count tried; one that
    raises or is not computed (``_NoAnswer``) is not (``len(r) < "a"`` raises for every count)."""
    literals = [value for node in ast.walk(top) if isinstance(node, ast.expr)
                for ok, value in [count.literal(node)] if ok]
    answers = set()
    for n in _counts_to_try([number for value in literals for number in _numbers(value)]):
        try:
            answer = count.value(top, n)
        except Exception:  # noqa: BLE001 - ``1 // len(r)``, ``_NoAnswer``: no answer to read
            return False
        answers.add((type(answer).__name__, repr(answer)))
        if len(answers) > 1:
            return False
    return True


def _vacuous_count_site(node: ast.expr, parents: dict[int, ast.AST]) -> ast.expr | None:
    """``node`` itself where it is one of a site's places (module doc)."""
    call = _len_call_above(node, parents)
    if call is None:
        return None
    decision = _decision(call, parents)
    if decision is True and _along(node, call, _bound()):
        return node
    return None


def _conditional_site(node: ast.expr, parents: dict[int, ast.AST]) -> frozenset[str] | None:
    """The names a site at ``node`` is one where each is hashable at run time (``_count_vacuous``),
    or None where ``node`` is no such place."""
    call = _len_call_above(node, parents)
    if call is None:
        return None
    decision = _decision(call, parents)
    if isinstance(decision, frozenset) and _along(node, call, _Assumed(_bound())):
        return decision
    return None


def _len_call_above(node: ast.expr, parents: dict[int, ast.AST]) -> ast.Call | None:
    """The ``len`` call of one argument at or above ``node``, below any comparison or statement."""
    call: ast.AST = node
    while not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "len"):
        above = parents.get(id(call))
        if above is None or isinstance(above, (ast.Compare, ast.stmt)):
            return None
        call = above
    if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
        return None
    return call


def _along(node: ast.expr, call: ast.Call, bound: Bound) -> bool:
    """Whether ``node`` is ``call`` or a node from its argument down to the value it reads."""
    if node is call:
        return True
    chain = measured(call.args[0], bound)[0]
    return any(node is n for n in (*chain[:-1], *read_chain(chain[-1])[1]))


def _decision(call: ast.Call, parents: dict[int, ast.AST]) -> bool | frozenset[str]:
    """``_count_vacuous`` of ``call``, kept per call."""
    decided = _DECIDED.get(id(call))
    if decided is None or decided[0] is not call:
        if len(_DECIDED) > 4096:  # trees of earlier runs: let them go
            _DECIDED.clear()
        decided = _DECIDED[id(call)] = (call, _count_vacuous(call, parents))
    return decided[1]


def _count_vacuous(call: ast.Call, parents: dict[int, ast.AST]) -> bool | frozenset[str]:
    """Whether an expression around ``call`` (``len`` of one argument) made of its count and
    constants alone answers alike for every count (module doc): ``len(r) >= 0`` of ``len(r) >= 0
    and len(r) == 3`` does, though the whole ``and`` does not. Where it does only if names of the
    tests' that a set holds are hashable (``y = list(r)[0]`` then ``len({y for _ in r}) <=
    len(r)``: one item at most, or it raises), those names: the site is one where each of them
    is hashable at run time (``_hashable_at``). Why: such a ``y`` counted the set's ``r`` for
    itself, so a forged ``primes`` emptied by ``r.reset()`` passed it and the loop after (1.0),
    while a ``y`` that is a list makes it read ``r`` (empty, or it raises)."""
    bound = _bound()
    if _vacuous_with(call, parents, bound):
        return True
    assumed = _Assumed(bound)
    if _vacuous_with(call, parents, assumed) and assumed.asked:
        return frozenset(assumed.asked)
    return False


def _vacuous_with(call: ast.Call, parents: dict[int, ast.AST], bound: Bound) -> bool:
    """``_count_vacuous`` where the tests bind the names of ``bound``."""
    count = _Count(ast.dump(measured(call.args[0], bound)[0][-1]), bound)
    if not count.counts(call):
        return False
    level: ast.expr = call
    while True:
        above = parents.get(id(level))
        if not isinstance(above, ast.expr) or not count.takes(above):
            return False
        level = above
        if _same_for_every_count(level, count):
            return True


def changes_with_the_count(compare: ast.Compare) -> bool:
    """Whether ``compare`` is made of counts of one value (``measured``, as its first ``len``
    measures) and constants alone, and some count tried changes its answer or raises: ``len({0 for
    x in q}) == len(q)`` holds for 0 or 1 items only, so it reads the count (``self_compared``
    keeps it); ``len([0 for x in q]) == len(q)`` holds for every count."""
    bound = _bound()
    call = next((node for node in ast.walk(compare) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                 and node.func.id == "len" and len(node.args) == 1 and not node.keywords
                 and not isinstance(node.args[0], ast.Starred)), None)
    if call is None:
        return False
    count = _Count(ast.dump(measured(call.args[0], bound)[0][-1]), bound)
    return count.takes(compare) and not _same_for_every_count(compare, count)


_SITE_KINDS = (ast.Attribute, ast.Call, ast.Name, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_SITES = Sites(_vacuous_count_site, kinds=_SITE_KINDS)


#: The places of sites that are sites where some names are hashable at run time, with those names
#: (``_conditional_site``), of the tests now running (``register``); parsed when first asked.
_conditional_places: Callable[[], dict[Place, frozenset[str]]] = dict


def register(sources: Iterable[tuple[str, str]]) -> None:
    """Take the tests' sources for ``counted_vacuously_above`` and ``counted_vacuously_here``
    (``Sites.register``); the names they bind are read from all of them, once, when first asked
    (a ``def abs`` of one step's is the ``abs`` another step calls)."""
    global _bound, _conditional_places
    listed = list(sources)
    found: list[Bound] = []

    def bound() -> Bound:
        if not found:
            merged: dict[str, bool] = {}
            for _, tree, _ in parsed(listed):
                for name, hashable in _bound_names(tree).items():
                    merged[name] = merged.get(name, True) and hashable
            found.append(merged)
        return found[0]

    _bound = bound
    _SITES.register(listed)
    conditional: list[dict[Place, frozenset[str]]] = []

    def places() -> dict[Place, frozenset[str]]:
        if not conditional:
            found_places: dict[Place, frozenset[str]] = {}
            for filename, tree, parents in parsed(listed):
                for node in ast.walk(tree):
                    if isinstance(node, _SITE_KINDS) and node.end_lineno is not None \
                            and node.end_col_offset is not None:
                        names = _conditional_site(node, parents)
                        if names is not None:
                            found_places[(filename, node.lineno, node.end_lineno, node.col_offset,
                                          node.end_col_offset)] = names
            conditional.append(found_places)
        return conditional[0]

    _conditional_places = places



def _hashable_at(frame: types.FrameType | None) -> bool:
    """Whether ``frame``, the tests' own code, stands at a site that is one where names are hashable
    at run time, and each is, as far as the trainer tells without asking the sample: a name whose
    value here is a list, dict, set or bytearray, a tuple holding one, or of a class whose
    ``__hash__`` is None, makes the set raise where it has items, so the count is a reading."""
    if frame is None:
        return False
    place = place_of(frame.f_code, frame.f_lasti)
    names = None if place is None else _conditional_places().get(place)
    if names is None:
        return False
    for name in names:
        for scope in (frame.f_locals, frame.f_globals):
            if name in scope:
                if _surely_unhashable(scope[name]):
                    return False
                break
    return True


def _surely_unhashable(value: Any, depth: int = 0) -> bool:
    """Whether hashing ``value`` raises, told without running anything of the sample's: a value
    of the sample's (``LIVES_IN_SAMPLE``) is taken for hashable (the count is then no reading)."""
    if getattr(type(value), "LIVES_IN_SAMPLE", False):
        return False
    if type(value) is tuple:
        return depth < 8 and any(_surely_unhashable(item, depth + 1) for item in value)
    return getattr(type(value), "__hash__", None) is None


def _tests_frame(frame: types.FrameType | None, limit: int) -> types.FrameType | None:
    """The nearest frame from ``frame`` up (at most ``limit``) that is the tests' own code."""
    for _ in range(limit):
        if frame is None or frame.f_code.co_filename in TESTS_FILES:
            return frame
        frame = frame.f_back
    return None


def counted_vacuously_above(limit: int = 12) -> bool:
    """Whether the nearest frame above this call that is the tests' own code (at most ``limit``
    up) stands at a site: ``len(r) >= 0`` reaches ``__len__`` through the tests' ``len``."""
    if _SITES.above(limit):
        return True
    return bool(_conditional_places()) and _hashable_at(_tests_frame(sys._getframe(1), limit))


def counted_vacuously_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking:
    ``len(b.log) >= 0``) is the tests' own code at a site."""
    if _SITES.here(depth):
        return True
    if not _conditional_places():
        return False
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    if frame.f_code in BOUND_CODE and frame.f_back is not None:
        frame = frame.f_back
    return frame.f_code.co_filename in TESTS_FILES and _hashable_at(frame)
