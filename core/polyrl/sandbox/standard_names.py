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
  others are the trainer's;
- in any group, a standard name whose every use is a call compared by ``==``/``!=`` with nothing
  the sample computes but that call is the task's (``standard_subjects.task_calls``): on data
  written out against data written out (``add(2, 3) == 5 and sub(5, 3) == 2``, where a wrong
  ``sub`` passed), or on objects the tests make of the solution's classes against such objects or
  data (``add(Frac(1, 2), Frac(1, 2)) == Frac(1, 1)``, ``add(Num(1), Num(2)) == 3``, where
  ``operator.add`` failed a right solution).

So a task whose own function is named ``gcd``, ``sqrt``, ``add`` or ``median`` still calls the
solution's where it is tested, and a standard helper beside it never does. What it costs: a task
function named like a standard helper that the same group also checks beside another function of
the task, other than as a call compared with data (``assert is_square(sqrt(16))``), is the
trainer's there, for every completion alike (no completion gains from it).
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from polyrl.sandbox.standard_subjects import fallback_calls, task_calls

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
                 read_globals: Collection[str], fallbacks: set[str] | None = None) -> set[str]:
    """The standard names these tests use as helpers (module doc): read as globals
    (``read_globals``), never bound by the tests (``bound``). ``fallbacks``, where given, gets
    the task's names that are the trainer's only where the solution defines no such name
    (``standard_subjects.fallback_calls``)."""
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
        nodes = [statements[i][0] for i in group]
        classes = {name for name in others if name[:1].isupper()}
        subject = None if others else next((name for name, in_test in reads if in_test), helper[0])
        helpers.update(name for name in helper if name != subject and not task_calls(nodes, name, classes))
        if fallbacks is not None:
            fallbacks.update(name for name in helper if name != subject and fallback_calls(nodes, name, classes))
    return helpers


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
