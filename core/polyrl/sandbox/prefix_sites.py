"""Which operands of the tests' ``zip`` and ``map`` calls are the solution's answer, and which a
value the tests wrote for it, found statically.

Why: zip stops at its shortest operand, so ``all(a == b for a, b in zip(f(3), [1, 2, 3]))`` holds
when ``f`` returns ``[1, 2]``: an off-by-one that drops the last item, or any correct prefix,
scored 1.0 (``zip_sites`` fails only an empty operand). The harness (``pairing``) fails an
ANSWER operand shorter than an EXPECTED one beside it, as ``strict=True`` would, and only there:

- ANSWER: every value it can hold is what a solution's function or name gives (``f(3)``,
  ``r = f(3)``, ``self.r``, ``sorted(r)``, ``r[0]``, ``r[1:]``, ``map(float, r)``), followed through
  the tests' names as ``zip_sites`` follows them; not one they cut to a length (``r[:3]``);
- EXPECTED: nothing it is made from touches the solution (a literal, ``expected``, a row of the
  tests' cases, a helper of theirs that calls no solution name), and it is not made from the
  answer call's own arguments (``zip(diffs(xs), xs)`` means to pair a shorter answer with its input);
- not a reference table the tests mean to read a prefix of: an EXPECTED value that is fixed (one
  binding, outside loops) beside an answer whose arguments vary (``for n in range(1, 9): zip(fib(n),
  FIB)``, a pytest parameter), or one the tests pair with two different answer calls (``zip(fib(5),
  FIB)`` and ``zip(fib(8), FIB)``), or a name bound once to a literal of more than twice as many
  items, plus one, as the answer call's largest argument where all its arguments are int literals
  (one ``zip(primes(5), FIRST_20)``: ``_longer_table``).

Every other operand is neither (a parameter of unknown value, a solution function passed to
``map``, a filtered answer...), and there zip behaves as Python's: erring that way costs a missed
wrong answer, the other way a right one scored 0. What the table rule costs: an expected value kept
under a name whose length does not follow the argument (``SEQ = [3, 10, 5, 16, 8, 4, 2, 1]`` for
``zip(collatz(3), SEQ)``) no longer fails a correct prefix; one written in the ``zip`` or sized by
the argument (``zip(f(3), [1, 2, 3])``, ``pascal_row(4)``'s 5 items) still does. Left open: a table
read once by a call with other arguments (``zip(primes_below(30), FIRST_20)``) reads as an expected
value and fails a right answer. ``range`` operands are counters, never EXPECTED (``pairing`` leaves
them out).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from polyrl.sandbox.object_use import attribute_path
from polyrl.sandbox.zip_sites import (
    _EACH_ITEM, _ITEM, _SAME_ITEMS, Site, _Binding, _origins, _read, pairing_calls)

#: An operand that is the solution's answer, one that is a value the tests wrote for it, and one that is neither.
ANSWER, EXPECTED, NEITHER = "answer", "expected", ""
_Values = dict[str, list[_Binding]]


def operand_roles(sources: Iterable[tuple[str, str]]) -> dict[Site, tuple[str, ...]]:
    """For each ``zip``/``map`` call in ``sources`` (filename, text) with two or more operands and
    no ``*`` among them, each operand's role (module doc). A place two calls share with different
    roles is left out, as is every place of tests nested too deep to follow."""
    try:
        return _operand_roles(sources)
    except RecursionError:
        return {}


def _operand_roles(sources: Iterable[tuple[str, str]]) -> dict[Site, tuple[str, ...]]:
    trees, values, theirs = _read(sources)
    facts = _Facts([tree for _, tree in trees], values, theirs)
    found: list[tuple[Site, list[ast.expr], list[list[ast.Call] | None]]] = []
    paired_with: dict[str, set[str]] = {}  # an operand of the tests' -> the answers it is paired with
    for site, operands in pairing_calls(trees, values):
        answers = [facts.answer_calls(o, set()) for o in operands]
        made_by = {"; ".join(sorted(ast.dump(c) for c in a)) for a in answers if a}
        for operand, answer in zip(operands, answers):
            if answer is None:
                paired_with.setdefault(ast.dump(operand), set()).update(made_by)
        found.append((site, operands, answers))
    roles: dict[Site, tuple[str, ...]] = {}
    clashes: set[Site] = set()
    for site, operands, answers in found:
        calls = [c for a in answers if a for c in a]
        inputs = {origin for c in calls for arg in _arguments(c) for origin in _origins(arg, values, theirs, set())
                  if not origin.startswith(_ITEM)}  # ``x`` and ``want`` of one case row are not one value
        varying = any(facts.varies(arg, set()) for c in calls for arg in _arguments(c))
        made: list[str] = []
        for operand, answer in zip(operands, answers):
            if answer is not None:
                made.append(ANSWER)
            elif not calls or facts.touches(operand, set()) or _origins(operand, values, theirs, set()) & inputs:
                made.append(NEITHER)
            elif not facts.varies(operand, set()) and (varying or len(paired_with.get(ast.dump(operand), ())) > 1
                                                       or _longer_table(operand, calls, values)):
                made.append(NEITHER)  # a reference table the tests read a prefix of
            else:
                made.append(EXPECTED)
        if roles.setdefault(site, tuple(made)) != tuple(made):
            clashes.add(site)
    for site in clashes:
        del roles[site]
    return roles


def _longer_table(operand: ast.expr, calls: list[ast.Call], values: _Values) -> bool:
    """Whether ``operand`` is a name bound once to a list or tuple literal of more than ``2 * n +
    1`` items, ``n`` the largest argument of the answer's calls, all of them int literals. Why: one
    ``zip(primes(5), FIRST_20)`` reads a prefix of a table kept for many answers, and a right
    ``primes(5)`` failed there as a cut answer; an expected value holds about as many items as the
    call asks for (``f(3)``'s 3, ``pascal_row(4)``'s 5), so an off-by-one still fails beside it."""
    if not isinstance(operand, ast.Name):
        return False
    bindings = values.get(operand.id, [])
    if len(bindings) != 1 or not isinstance(bindings[0][0], (ast.List, ast.Tuple)):
        return False
    items = bindings[0][0].elts
    if any(isinstance(item, ast.Starred) for item in items):
        return False
    arguments = [arg for call in calls for arg in _arguments(call)]
    sizes = [arg.value for arg in arguments if isinstance(arg, ast.Constant) and type(arg.value) is int]
    return bool(sizes) and len(sizes) == len(arguments) and len(items) > 2 * max(sizes) + 1


def _arguments(call: ast.Call) -> Iterator[ast.expr]:
    """A call's argument expressions, keywords' values and ``*``/``**`` operands too."""
    for arg in call.args:
        yield arg.value if isinstance(arg, ast.Starred) else arg
    for keyword in call.keywords:
        yield keyword.value


class _Facts:
    """What the tests' names may hold: their bindings (``zip_sites._bind_all``), their own
    functions and parameters, and the names they bind at all (``theirs``)."""

    def __init__(self, trees: list[ast.Module], values: _Values, theirs: frozenset[str]) -> None:
        self.values = values
        self.theirs = theirs
        self.functions: dict[str, list[ast.AST]] = {}
        self.parameters: set[str] = set()
        for node in (node for tree in trees for node in ast.walk(tree)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, []).extend(node.body)
            elif isinstance(node, ast.Lambda):
                self.parameters.update(a.arg for a in _parameters(node.args))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.parameters.update(a.arg for a in _parameters(node.args))
            elif isinstance(node, ast.ClassDef):
                self.functions.setdefault(node.name, []).extend(node.body)

    def answer_calls(self, node: ast.expr, seen: set[str]) -> list[ast.Call] | None:
        """The solution's calls whose answer ``node`` holds or is read from (its items, a copy, a
        slice, a conversion of each item), or None where it may hold anything else. An empty list:
        a value of the solution's named without a call."""
        if isinstance(node, ast.Subscript):
            if isinstance(node.slice, ast.Slice) and (node.slice.upper is not None or node.slice.step is not None):
                return None  # ``f(10)[:3]``: the tests cut it to the length they mean to check
            return self.answer_calls(node.value, seen)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name, args = node.func.id, node.args
            if name not in self.theirs:
                return [node]
            one = len(args) == 1 and not node.keywords and not isinstance(args[0], ast.Starred)
            if name in _SAME_ITEMS and one and name not in ("set", "frozenset", "str", "bytes"):
                return self.answer_calls(args[0], seen)
            if name in _EACH_ITEM and name != "filter" and len(args) == _EACH_ITEM[name] + 1 \
                    and not node.keywords and not any(isinstance(a, ast.Starred) for a in args) \
                    and not self.touches(args[0] if name == "map" else ast.Constant(0), set()):
                return self.answer_calls(args[-1], seen)  # ``map(float, r)``, ``enumerate(r)``: as many items
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = self.answer_calls(node.func.value, seen)  # ``Solution().f(x)``, ``s.items()``
            return [*owner, node] if owner else None
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1 \
                and not node.generators[0].ifs and not node.generators[0].is_async:
            return self.answer_calls(node.generators[0].iter, seen)  # one item per item of the answer
        key = attribute_path(node)
        if key is None:
            return None
        bindings = self.values.get(key, [])
        if not bindings:
            root = key.split(".")[0]
            return [] if root not in self.theirs and root != "self" else None
        if key in seen:
            return None
        seen.add(key)
        found: list[ast.Call] = []
        for value, _ in bindings:
            calls = self.answer_calls(value, seen)
            if calls is None:
                return None
            found.extend(calls)
        return found

    def touches(self, node: ast.AST, seen: set[str]) -> bool:
        """Whether anything ``node`` is made from may be the solution's: a name of its, a tests'
        name bound to such a value or of unknown value (a parameter no call of the tests gives), a
        helper of the tests' that uses the solution."""
        for sub in _names(node):
            key = attribute_path(sub)
            assert key is not None
            bindings = self.values.get(key, [])
            root = key.split(".")[0]
            if key in seen:
                continue
            seen.add(key)
            if bindings:
                if any(self.touches(value, seen) for value, _ in bindings):
                    return True
            elif root not in self.theirs or (key == root and key in self.parameters) or root == "self":
                return True
            elif key == root and key in self.functions and any(self.touches(b, seen) for b in self.functions[key]):
                return True
        return False

    def varies(self, node: ast.AST, seen: set[str]) -> bool:
        """Whether ``node`` may be another value each time the tests reach it: it reads a loop's or
        comprehension's target, a parameter (of a pytest case, a helper), or a name bound twice."""
        for sub in _names(node):
            key = attribute_path(sub)
            assert key is not None
            if key in seen:
                continue
            seen.add(key)
            bindings = self.values.get(key, [])
            if len(bindings) > 1 or any(depth for _, depth in bindings) or (not bindings and key in self.parameters):
                return True
            if bindings and self.varies(bindings[0][0], seen):
                return True
        return False


def _names(node: ast.AST) -> Iterator[ast.expr]:
    """The outermost names and attribute paths ``node`` reads (``self.exp``, not ``self`` in it)."""
    if isinstance(node, (ast.Name, ast.Attribute)) and attribute_path(node) is not None:
        yield node
        return
    for child in ast.iter_child_nodes(node):
        yield from _names(child)


def _parameters(arguments: ast.arguments) -> list[ast.arg]:
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
            *([arguments.vararg] if arguments.vararg else []), *([arguments.kwarg] if arguments.kwarg else [])]
