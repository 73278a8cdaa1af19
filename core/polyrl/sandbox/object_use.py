"""Which of the solution's names the tests use as objects, whose own answers the str/list queries are.

Why: a query such as ``s.count(c) == 1`` or ``s.find(p) == 0`` has the same expected answer
whatever the data, so an object of the sample's that always answers 1 or 0 passed it without the
work: ``WORDS = Liar()`` against ``all(WORDS.count(w) == 1 for w in ...)``, and a task function
spelled like a class, ``def Dedupe(s): return Liar()`` against ``Dedupe(s).count(c) == 1``. Data
the sample holds comes over as itself and answers such queries here; an object of its answers
them (``remote.DATA_QUERIES``) only where the tests use it, or the solution's name it came from,
as an object: they

- call one of its methods for the effect, as a statement (``tally.add('a')``, ``uf.union(0, 1)``),
- read an attribute no built-in data type has (``s.push(1)``, ``Solution().twoSum``), or
- set or delete an attribute of it.

What a receiver came from is followed through the tests' own names (``uf = UnionFind(3)``,
``self.stack = Stack()`` in ``setUp``, a loop over a list of them, ``from solution import``) down
to the solution's name, found statically so the order of the tests does not matter. An instance
the tests make of a class they name (``Words('a b a').count('a') == 2``, an instance of the
solution's ``Words``) answers too, unless they ask such queries of it in a loop, a comprehension,
a lambda or with an argument that is no constant (``varied_query_roots``): there the expected
answer is the same for many arguments, the forgery's shape (a ``class Dedupe`` whose ``count``
says 1 against ``all(Dedupe(s).count(c) == 1 for c in s)``). What it costs: a class queried only
in loops (``all(w.count(x) == 1 for x in 'ab')`` and nothing else) or named like a function
(``class words``) cannot answer; a test that changes a returned value in place (``r =
Dedupe(s); r.sort()``) makes it an object.
"""

from __future__ import annotations

import ast
import builtins
import collections
import decimal
import fractions
from collections.abc import Collection, Iterable, Iterator

from polyrl.sandbox.standard_names import SOLUTION_MODULE

#: Attributes of the data types that come over as themselves (``harness``: built-in data and the
#: standard types it rebuilds): asking one of these treats the value as data.
DATA_ATTRIBUTES = frozenset(
    name for kind in (str, bytes, bytearray, list, tuple, dict, set, frozenset, int, float, complex,
                      collections.Counter, collections.OrderedDict, collections.deque, collections.defaultdict,
                      fractions.Fraction, decimal.Decimal)
    for name in dir(kind))
#: Bindings keep these expressions; ``None`` where nothing is followed (an import, a ``def``, a
#: parameter).
_Values = dict[str, list[ast.expr | None]]
#: What ``import solution`` binds (the sample's names, ``harness.SolutionModule``).
_SOLUTION = ast.Constant(value=SOLUTION_MODULE)
#: In ``varied_query_roots``: a receiver the tests' names do not lead back from (``def check(d):
#: for c in s: assert d.count(c) == 1``), which may be any of the solution's objects.
ANY_ROOT = "*"
#: Receivers that are the tests' own data (``'abc'.count(c)``).
_LITERALS = (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Set, ast.Dict)
#: Where one expression of the tests runs for many values.
_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)


def _called_as_statements(tree: ast.AST) -> set[int]:
    """The ids of the callee nodes of calls made as statements (``g.remove(3)``): called for
    their effect, not their value."""
    return {id(node.value.func) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)}


def object_roots(sources: Iterable[str]) -> frozenset[str]:
    """The names (the solution's among them) that the tests use as objects (module doc)."""
    trees, values = _bound(sources)
    roots: set[str] = set()
    for tree in trees:
        effects = _called_as_statements(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _used_as_object(node, effects):
                roots |= _roots(node.value, values, set())
    return frozenset(roots)


def changer_roots(sources: Iterable[str]) -> frozenset[str]:
    """The names (the solution's among them) of objects the tests change: call a method of as a
    statement (``g.remove(3)``, ``q.push(1)``) or set or delete an attribute of; ``ANY_ROOT`` among
    them when a receiver's origin is not found (a helper's parameter). Why: an answer the sample
    returned (``nodes = g.nodes``, ``r = q.items()``) may change when such an object of its family
    is changed, and only then (``remote.Remote._snapshot``); a method called for its value
    (``assert sol.primes(5) == ...``) changes nothing a right answer relies on, while a forged
    answer emptied by any later call passed ``assert len(r) == 3`` and then a loop over it."""
    trees, values = _bound(sources)
    roots: set[str] = set()
    for tree in trees:
        effects = _called_as_statements(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and (id(node) in effects or not isinstance(node.ctx, ast.Load)):
                roots |= _roots(node.value, values, set()) or {ANY_ROOT}
    return frozenset(roots)


def effect_call_names(sources: Iterable[str]) -> frozenset[str]:
    """The plain names the tests call as a statement (``register('a')``, ``reset()``): the
    solution's functions among them are called for their effect, which may change any value of the
    sample's through its global state (``remote.Remote._snapshot``); one called for its value
    (``assert len(primes(5)) == 5``) is not, nor a builtin's name a solution shadows (``print(r)``:
    a forged ``print`` would let its value change)."""
    names: set[str] = set()
    for tree in _bound(sources)[0]:
        names.update(node.value.func.id for node in ast.walk(tree) if isinstance(node, ast.Expr)
                     and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name))
    return frozenset(names - set(dir(builtins)))


def varied_query_roots(sources: Iterable[str], queries: Collection[str]) -> frozenset[str]:
    """The names whose ``queries`` (``s.count(x)``...) the tests ask other than once with constant
    arguments: in a loop, a comprehension or a lambda, with an argument that is not a constant (a
    helper's parameter), or by passing the method on (``map(d.count, s)``); ``ANY_ROOT`` among them when a receiver's origin is not found. Why:
    such a check's expected answer is the same for every argument
    (``all(Dedupe(s).count(c) == 1 for c in s)``), which an object answering 1 meets without the
    work, while ``Words('a b a').count('a') == 2`` has one answer to know, as any call has."""
    trees, values = _bound(sources)
    roots: set[str] = set()
    for tree in trees:
        for receiver in _varied_queries(tree, queries, False):
            found = _roots(receiver, values, set())
            if not found and not isinstance(receiver, _LITERALS):  # a helper's parameter: could be any
                found = {ANY_ROOT}
            roots |= found
    return frozenset(roots)


def _varied_queries(node: ast.AST, queries: Collection[str], looped: bool) -> Iterator[ast.expr]:
    """The receivers of the calls of ``queries`` with arguments under ``node`` that are looped or
    not constant, and of such a method passed on uncalled (``map(d.count, s)``: called elsewhere,
    with anything)."""
    looped = looped or isinstance(node, _LOOPS)
    children: Iterable[ast.AST] = ast.iter_child_nodes(node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in queries:
        arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
        if arguments and (looped or not all(map(_constant, arguments))):
            yield node.func.value
        children = [node.func.value, *arguments]
    elif isinstance(node, ast.Attribute) and node.attr in queries:
        yield node.value
    for child in children:
        yield from _varied_queries(child, queries, looped)


def _constant(node: ast.expr) -> bool:
    """A literal (``'a'``, ``-1``, ``('a', 'b')``)."""
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(map(_constant, node.elts))
    return isinstance(node, ast.Constant)


def _bound(sources: Iterable[str]) -> tuple[list[ast.Module], _Values]:
    """The sources that parse, and every binding in them (``_bind_all``)."""
    trees = [tree for tree in map(_parse, sources) if tree is not None]
    values: _Values = {}
    for tree in trees:
        _bind_all(tree, values)
    return trees, values


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # not Python: fails when run, using nothing
        return None


def _used_as_object(node: ast.Attribute, effects: set[int]) -> bool:
    """A method called as a statement, an attribute no data type has (a leading ``_`` is left
    out: ``_asdict`` of a namedtuple), or one set or deleted."""
    if not isinstance(node.ctx, ast.Load) or id(node) in effects:
        return True
    return not node.attr.startswith("_") and node.attr not in DATA_ATTRIBUTES


def _bind_all(tree: ast.Module, values: _Values) -> None:
    """Every binding in ``tree``, whatever its scope (a name bound to a stack in one test and to
    a string in another counts as both: the estimate errs towards "an object")."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                _bind(target, node.value, values)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            _bind(node.target, node.iter, values)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            _bind(node.optional_vars, node.context_expr, values)
        elif isinstance(node, ast.ImportFrom) and node.module == SOLUTION_MODULE and node.level == 0:
            for alias in node.names:  # the solution's own name: unbound here, so itself
                if alias.asname not in (None, alias.name):
                    values.setdefault(alias.asname, []).append(ast.Name(id=alias.name, ctx=ast.Load()))
        elif isinstance(node, ast.Import) and any(alias.name == SOLUTION_MODULE for alias in node.names):
            for alias in node.names:
                values.setdefault(alias.asname or alias.name, []).append(
                    _SOLUTION if alias.name == SOLUTION_MODULE else None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                values.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            values.setdefault(node.name, []).append(None)
        elif isinstance(node, ast.arg):
            values.setdefault(node.arg, []).append(None)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            values.setdefault(node.name, []).append(None)


def _bind(target: ast.expr, value: ast.expr, values: _Values) -> None:
    """``target`` (a name, ``self.x``, or a tuple of them) now holds what ``value`` holds."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            _bind(element, value, values)
        return
    if isinstance(target, ast.Starred):
        _bind(target.value, value, values)
        return
    key = attribute_path(target)
    if key is not None:
        values.setdefault(key, []).append(value)


def attribute_path(node: ast.expr) -> str | None:
    """``x`` or ``self.x.y`` as a key (``cls.x`` of ``setUpClass`` is ``self.x`` in the tests)."""
    if isinstance(node, ast.Name):
        return "self" if node.id == "cls" else node.id
    if isinstance(node, ast.Attribute):
        base = attribute_path(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _is_solution_module(node: ast.expr, values: _Values) -> bool:
    """Whether ``node`` is a name the tests bound with ``import solution [as s]``."""
    return isinstance(node, ast.Name) and any(value is _SOLUTION for value in values.get(node.id, ()))


def _roots(node: ast.expr, values: _Values, seen: set[str]) -> set[str]:
    """The names ``node``'s value comes from: a name nothing in the tests binds is itself (the
    solution's, a module, a builtin); one they bind is what they bound it to."""
    key = attribute_path(node)
    if key is not None and key in values:
        if key in seen:
            return set()
        seen.add(key)
        return set().union(*[_roots(v, values, seen) for v in values[key] if v is not None])
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute) and _is_solution_module(node.value, values):
        return {node.attr}  # ``solution.tally``
    if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred, ast.Await, ast.NamedExpr)):
        return _roots(node.value, values, seen)
    if isinstance(node, ast.Call):
        return _roots(node.func, values, seen)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return set().union(*[_roots(e, values, seen) for e in node.elts])
    if isinstance(node, ast.IfExp):
        return _roots(node.body, values, seen) | _roots(node.orelse, values, seen)
    if isinstance(node, ast.BoolOp):
        return set().union(*[_roots(v, values, seen) for v in node.values])
    return set()
