"""Which names the tests use without binding them are the trainer's standard helpers, never the sample's.

Why: a name the tests read but never bind (its import sits in another column, or in the
solution) is looked up among the solution's names. Where the tests use it to build or check an
expected value (``assert f(xs) == list(permutations(xs))``, ``== reduce(...)``, ``bisect_left``,
``ascii_lowercase``), a solution defining both ``f`` and ``permutations`` to return ``[]`` passed.
A list of such names was always one name short, so the rule is general:

- a *standard name* is a public function, class or text/number constant of a pure standard-library
  module tests lean on (``HELPER_MODULES``: math, itertools, functools, operator, heapq, bisect,
  string, collections, statistics, ...), or one of the numpy/pandas checks in ``TEST_NAMES``, or,
  in tests that name numpy (``np``, ``numpy``, a numpy check), one of numpy's (``numpy_names``);
- the tests' statements (setup's too) are grouped by the data that flows between them: two are in
  one group when one reads a name the other binds to code or to a value computed from a name (an
  assignment, a loop target, a ``def``, a ``class``; not an import, which any statement may share,
  nor data written out, ``xs = [3, 1, 2]``, which independent checks often share);
- in a group that also reads a solution name that is not a standard name (or one imported from
  ``solution``), every standard name it reads is the trainer's: the other name is the task's, the
  standard ones build or check what it must return;
- in a group that reads only standard names, the first one its test steps name is the task's
  (``assert gcd(12, 8) == 4``, ``check(median)``, ``assert count(s) == Counter(s)``) and the
  others are the trainer's.

So a task whose own function is named ``gcd``, ``sqrt``, ``add`` or ``median`` still calls the
solution's where it is tested, and a standard helper beside it never does. What it costs: a task
function named like a standard helper that the same group also checks beside another function of
the task (``x = 16; assert sqrt(x) == 4; assert is_square(x)``) is the trainer's there, for every
completion alike (no completion gains from it).
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
from collections.abc import Collection, Iterable, Sequence
from typing import Any

#: Pure standard-library modules whose public names tests use unimported, in order of precedence
#: for a name several define (``math.sqrt`` before ``cmath.sqrt``, ``operator.sub`` before ``re.sub``).
HELPER_MODULES = ("math", "itertools", "functools", "operator", "heapq", "bisect", "string", "collections",
                  "statistics", "fractions", "decimal", "copy", "random", "re", "json", "cmath")
#: Checks of libraries outside the standard library (imported only when the tests use them):
#: name in the tests -> (module, attribute).
TEST_NAMES = {
    "allclose": ("numpy", "allclose"), "array_equal": ("numpy", "array_equal"),
    **{name: ("numpy.testing", name) for name in ("assert_allclose", "assert_array_equal", "assert_equal",
                                                  "assert_almost_equal", "assert_array_almost_equal")},
    **{name: ("pandas.testing", name) for name in ("assert_frame_equal", "assert_series_equal")}}
#: Names that show numpy is what the tests mean (``numpy_names``): the module's usual names and
#: its checks above.
NUMPY_MARKS = frozenset({"np", "numpy", *(name for name, (module, _) in TEST_NAMES.items() if module.startswith("numpy"))})
#: The module name under which tests import the solution (``from solution import add``).
SOLUTION_MODULE = "solution"
_BUILTIN_NAMES = frozenset(dir(builtins))


@functools.cache
def standard_names() -> dict[str, tuple[str, str]]:
    """Every standard name: name -> (module, attribute)."""
    found: dict[str, tuple[str, str]] = {}
    for module_name in HELPER_MODULES:
        module = importlib.import_module(module_name)
        public = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        for name in public:
            if name not in found and _is_helper(name, getattr(module, name, None)):
                found[name] = (module_name, name)
    for name, where in TEST_NAMES.items():
        found.setdefault(name, where)
    return found


@functools.cache
def numpy_names() -> dict[str, tuple[str, str]]:
    """numpy's public functions, classes and number constants that no module of
    ``HELPER_MODULES`` has (``array``, ``arange``, ``zeros``, ``linspace``...), standard names in
    tests that name numpy (``NUMPY_MARKS``). Why: leaning on the solution's ``from numpy import
    *``, such a name was the solution's, so ``def array(x)`` agreeing with a wrong ``f`` passed
    ``np.array_equal(f(x), array([1, 2]))``. Tests that never name numpy keep a task's own
    ``zeros`` or ``array``. Empty where numpy does not import (then they stay the solution's)."""
    try:
        numpy = importlib.import_module("numpy")
    except Exception:  # noqa: BLE001 - not installed in the trainer
        return {}
    standard = standard_names()
    found: dict[str, tuple[str, str]] = {}
    for name in getattr(numpy, "__all__", None) or [n for n in dir(numpy) if not n.startswith("_")]:
        try:
            value = getattr(numpy, name)
        except Exception:  # noqa: BLE001 - a name numpy lists but refuses (deprecated)
            continue
        if name not in standard and _is_helper(name, value):
            found[name] = ("numpy", name)
    return found


def standard_name(name: str) -> tuple[str, str]:
    """(module, attribute) of a standard name (``standard_names``, then ``numpy_names``)."""
    return standard_names().get(name) or numpy_names()[name]


def _is_helper(name: str, value: Any) -> bool:
    """A public callable or text/number constant, never a builtin's name (those are always the
    trainer's) nor a one-letter one (``re.I``, ``math.e``: a test's own data more often)."""
    if name.startswith("_") or len(name) < 2 or name in _BUILTIN_NAMES:
        return False
    return callable(value) or (isinstance(value, (str, int, float)) and not isinstance(value, bool))


@functools.cache
def standard_objects() -> dict[int, tuple[str, str]]:
    """id -> (module, name) of the standard names' objects and of the builtins' callables: what a
    test may pass to the solution by name (``apply(add, 1, 2)``, ``sort_by(xs, len)``), which the
    sample looks up in its own copy of that module."""
    found: dict[int, tuple[str, str]] = {}
    for name, value in vars(builtins).items():
        if not name.startswith("_") and callable(value):
            found.setdefault(id(value), ("builtins", name))
    for module, attr in standard_names().values():
        if module in HELPER_MODULES:
            found.setdefault(id(getattr(importlib.import_module(module), attr)), (module, attr))
    return found


def standard_object_name(value: Any) -> tuple[str, str] | None:
    """(module, name) when ``value`` is a standard object (``standard_objects``), else None."""
    where = standard_objects().get(id(value))
    if where is None:
        return None
    module, name = where
    return where if getattr(importlib.import_module(module), name, None) is value else None


def helper_names(steps: Sequence[tuple[str, bool]], setup: str, bound: Collection[str],
                 read_globals: Collection[str]) -> set[str]:
    """The standard names these tests use as helpers (module doc): read as globals
    (``read_globals``), never bound by the tests (``bound``)."""
    statements = [(node, False) for node in _parsed(setup)]
    statements += [(node, is_test) for source, is_test in steps for node in _parsed(source)]
    imported = solution_imports(node for node, _ in statements)
    standard = standard_names()
    if NUMPY_MARKS & set(read_globals):  # numpy is what they mean: its names too (``numpy_names``)
        standard = {**numpy_names(), **standard}
    helpers: set[str] = set()
    for group in _groups([node for node, _ in statements], bound):
        reads = [(name, statements[i][1]) for i in group for name in _reads(statements[i][0])
                 if name in imported or (name in read_globals and name not in bound and name not in _BUILTIN_NAMES)]
        helper = [name for name, _ in reads if name in standard and name not in imported]
        if not helper:
            continue
        others = {name for name, _ in reads if name in imported or name not in standard}
        if others:
            tests = [statements[i][0] for i in group if statements[i][1]]
            subject = _called_on_objects(tests, helper, others, _made_by_call([statements[i][0] for i in group]))
            helpers.update(name for name in helper if name != subject)
            continue
        subject = next((name for name, in_test in reads if in_test), helper[0])
        helpers.update(name for name in helper if name != subject)
    return helpers


def _called_on_objects(tests: list[ast.stmt], helper: list[str], others: Collection[str],
                       made: dict[str, str]) -> str | None:
    """The standard name that is the task's in a group reading other solution names (module doc):
    when every other one is spelled like a class (``Frac``, ``Vec``), the first standard name the
    test steps call on an object of theirs (``Frac(1, 2)``, or a name bound to one, ``v = Vec(1, 2)``)
    where that call is compared with expected values: literals, the tests' names, or more such
    objects (``assert add(Frac(1, 2), Frac(1, 2)) == Frac(1, 1)``). Why: that ``add`` was the
    trainer's ``operator.add``, which no object of the sample's answers, so a right solution
    scored 0. Sound: what it returns meets the tests' values only as the same plain data, and the
    sample's objects only through the sample's own ``==``, as any of its objects does
    (``remote.Remote._compare``); a standard name checking or building the expected value from
    data (``isclose(area(2), 12.57)``, ``== list(permutations(xs))``, ``sqrt(side(4)) == 2``), or
    compared with anything else the sample computes (``== Frac(1, 2).double()``), stays the
    trainer's. None otherwise."""
    classes = {name for name in others if name[:1].isupper()}
    if classes != set(others):
        return None

    def made_here(node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id in classes
        return isinstance(node, ast.Name) and made.get(node.id) in classes

    def expected(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return not isinstance(node.value, bool) and node.value is not None
        if made_here(node):
            return True
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return all(expected(item) for item in node.elts)
        return isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)

    for statement in tests:
        for compare in ast.walk(statement):
            if not isinstance(compare, ast.Compare):
                continue
            sides = [compare.left, *compare.comparators]
            for i, side in enumerate(sides):
                if (isinstance(side, ast.Call) and isinstance(side.func, ast.Name) and side.func.id in helper
                        and any(made_here(a) for a in (*side.args, *(k.value for k in side.keywords)))
                        and all(expected(other) for j, other in enumerate(sides) if j != i)):
                    return side.func.id
    return None


def _made_by_call(nodes: Iterable[ast.stmt]) -> dict[str, str]:
    """Names the statements bind only by plain assignments from a call of one name: name -> that
    name (``v = Vec(1, 2)``); a name bound otherwise too is left out."""
    made: dict[str, str] = {}
    plain: set[int] = set()  # the targets of those assignments
    other: set[str] = set()
    for node in nodes:
        for inner in ast.walk(node):
            if (isinstance(inner, ast.Assign) and len(inner.targets) == 1 and isinstance(inner.targets[0], ast.Name)
                    and isinstance(inner.value, ast.Call) and isinstance(inner.value.func, ast.Name)):
                target = inner.targets[0].id
                if made.setdefault(target, inner.value.func.id) != inner.value.func.id:
                    other.add(target)
                plain.add(id(inner.targets[0]))
            elif isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)) and id(inner) not in plain:
                other.add(inner.id)
    return {name: callee for name, callee in made.items() if name not in other}


def solution_imports(nodes: Iterable[ast.AST]) -> set[str]:
    """Names the tests bind to the solution's (``from solution import add``, ``import solution``)."""
    names: set[str] = set()
    for node in nodes:
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and inner.level == 0 and inner.module == SOLUTION_MODULE:
                names.update(a.asname or a.name for a in inner.names if a.name != "*")
            elif isinstance(inner, ast.Import):
                names.update(a.asname or a.name for a in inner.names if a.name == SOLUTION_MODULE)
    return names


def _parsed(source: str) -> list[ast.stmt]:
    try:
        return ast.parse(source).body if source else []
    except SyntaxError:  # not Python: fails when run, binding and reading nothing
        return []


def _reads(node: ast.AST) -> list[str]:
    """Names read in ``node``, nested code included, in source order."""
    names = [inner for inner in ast.walk(node) if isinstance(inner, ast.Name) and not isinstance(inner.ctx, ast.Store)]
    return [n.id for n in sorted(names, key=lambda n: (n.lineno, n.col_offset))]


def _stored(node: ast.stmt) -> set[str]:
    """Names ``node`` assigns (nested code included) or defines; none for an import."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return set()
    names = {inner.id for inner in ast.walk(node) if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store)}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
    return names


def _binds(node: ast.stmt, bound: Collection[str]) -> set[str]:
    """The tests' global names ``node`` binds to a value that may come from a solution or standard
    name: code (``def``, ``class``), a value computed from some name, or one a statement other than
    an ``assert`` hands to a call, which may change it (``heappush(h, 3)``). Left out: imports (any
    statement may share them) and data written out (``xs = [3, 1, 2]``, ``s = "ab"``), the inputs
    several independent checks often share."""
    names = _stored(node)
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return names & set(bound)
    reads = set(_reads(node))
    if not reads - _BUILTIN_NAMES:
        return set()
    if not isinstance(node, ast.Assert):  # a call may change what it is given (``heappush(h, 3)``)
        names |= reads
    return names & set(bound)


def _groups(nodes: list[ast.stmt], bound: Collection[str]) -> list[list[int]]:
    """Indices of ``nodes`` grouped by the names one binds and another reads (union-find)."""
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    assigned = set(bound) & set().union(*[_stored(node) for node in nodes])  # never an import's name
    binders: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in _binds(node, assigned):
            binders.setdefault(name, []).append(i)
    for i, node in enumerate(nodes):
        for name in set(_reads(node)) | _binds(node, assigned):
            for j in binders.get(name, ()):
                parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(nodes)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())
