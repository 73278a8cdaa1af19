"""Which module or standard object a name stands for where the tests run.

Why a module of its own: a module the solution imported (``local_module``), a well-known module
name the tests use without importing it (``unbound_modules``) and a standard helper
(``helper_objects``) are the trainer's own, never the sample's; the lists of which names
(``SAFE_MODULES``, ``TEST_MODULES``) and the views they are given (``tests_view``) decide that
together.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Collection, Iterable
from typing import Any

from polyrl.sandbox.module_views import ModulesView, ModuleView, ModuleWithViews
from polyrl.sandbox.numpy_checks import NumpyChecks
from polyrl.sandbox.remote_exceptions import RemoteError
from polyrl.sandbox.standard_names import standard_name

#: The only modules a sample's module-typed value can stand for here: standard-library modules
#: that do nothing on import and keep no state a call through them could change for later samples.
SAFE_MODULES = frozenset({"math", "cmath", "re", "string", "collections", "collections.abc", "itertools",
                          "functools", "operator", "heapq", "bisect", "statistics", "fractions", "datetime",
                          "json", "typing", "copy"})
#: Modules tests use without importing them (the import sits in another column, or the solution
#: made it): name in the tests -> module. Only names used as a module (``name.attr``) are bound,
#: so a task whose function is named ``copy`` still calls the solution's. Standard-library
#: modules that do nothing on import besides: ``assert digest(s) == hashlib.md5(...).hexdigest()``
#: leaning on the solution's ``import hashlib`` met a ``class hashlib`` of the solution's making.
TEST_MODULES = {**{name: name for name in (
    "math", "cmath", "re", "string", "collections", "itertools", "functools", "operator", "heapq", "bisect",
    "statistics", "fractions", "decimal", "datetime", "json", "typing", "copy", "random", "sys", "time",
    "os", "hashlib", "textwrap", "unicodedata", "calendar", "fnmatch", "difflib", "array", "base64", "binascii",
    "zlib", "struct", "ipaddress", "html", "enum", "dataclasses", "numbers", "keyword", "secrets", "uuid",
    "numpy", "pandas")}, "np": "numpy", "pd": "pandas"}


class Unavailable:
    """A module the solution imported that the tests cannot use from here."""

    def __init__(self, name: str) -> None:
        self._name = name[:100]

    def __getattr__(self, attr: str) -> Any:
        raise RemoteError(f"module {self._name!r} of the solution is not available to the tests")


class NotInstalled:
    """What a ``TEST_MODULES`` or standard name (``standard_names``) the tests use stands for when the trainer
    cannot import its module: every use raises. Why not the solution's, as before: a sample
    defining ``class pd`` whose ``testing.assert_frame_equal`` accepts anything passed every
    pandas test on a trainer without pandas."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self) -> RemoteError:
        return RemoteError(f"{self._name!r} is not installed where the tests run (the trainer)")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        raise self._refuse()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse()


def tests_view(module: Any, builtins_view: Any = None) -> Any:
    """The module as the tests use it: numpy and numpy.testing as ``NumpyChecks``; with the run's
    ``builtins_view``, ``sys`` and ``importlib`` as ``ModuleWithViews`` whose ``sys.modules['builtins']``
    and ``importlib.import_module('builtins')`` (``importlib.__import__`` too) are that view, as ``import builtins`` is (Python's
    zip held vacuously through them); others as they are."""
    name = getattr(module, "__name__", None)
    if name in ("numpy", "numpy.testing"):
        return NumpyChecks(module)
    if builtins_view is not None and module is sys:
        return ModuleWithViews(sys, {"modules": ModulesView({"builtins": builtins_view})})
    if builtins_view is not None and module is importlib:
        def import_module(name: str, package: str | None = None) -> Any:
            return builtins_view if name == "builtins" else importlib.import_module(name, package)

        def import_(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
            if name == "builtins" and level == 0:
                return builtins_view
            return tests_view(importlib.__import__(name, globals, locals, fromlist, level), builtins_view)
        return ModuleWithViews(importlib, {"import_module": import_module, "__import__": import_})
    return module


def local_module(name: str) -> Any:
    """The stand-in for a module the solution imported: a read-only view of the trainer's own
    copy for a name in ``SAFE_MODULES``, else an unusable placeholder. Nothing else is imported
    on the sample's word (``*.__main__`` and package modules run code on import)."""
    if name in SAFE_MODULES:
        try:
            return ModuleView(sys.modules.get(name) or importlib.import_module(name))
        except Exception:  # noqa: BLE001 - not importable in this interpreter
            pass
    return Unavailable(name)


def unbound_modules(sources: Iterable[str], bound: Collection[str], builtins_view: Any = None) -> dict[str, Any]:
    """The real modules for the ``TEST_MODULES`` names these sources use only as a module
    (``math.isclose``) and never bind; one that does not import here is ``NotInstalled``, never
    the solution's."""
    return module_objects(unbound_module_names(sources, bound), builtins_view)


def unbound_module_names(sources: Iterable[str], bound: Collection[str]) -> tuple[str, ...]:
    """The ``TEST_MODULES`` names of ``unbound_modules``, sorted: found from the tests' text alone,
    so ``tests_analysis`` keeps them for every sample of the same tests."""
    as_module: set[str] = set()
    otherwise: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        bases = {id(node.value) for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (as_module if id(node) in bases else otherwise).add(node.id)
    return tuple(name for name in sorted(as_module - otherwise - set(bound)) if name in TEST_MODULES)


def module_objects(names: Iterable[str], builtins_view: Any = None) -> dict[str, Any]:
    """The trainer's module (its tests' view) for each of ``unbound_module_names``' names; one that
    does not import here is ``NotInstalled``, never the solution's."""
    modules: dict[str, Any] = {}
    for name in names:
        try:
            modules[name] = tests_view(importlib.import_module(TEST_MODULES[name]), builtins_view)
        except Exception:  # noqa: BLE001 - not installed in the trainer
            modules[name] = NotInstalled(TEST_MODULES[name])
    return modules


def helper_objects(names: Iterable[str]) -> dict[str, Any]:
    """The trainer's own object for each standard name the tests use as a helper
    (``standard_names.helper_names``); one whose module does not import here is ``NotInstalled``,
    never the solution's."""
    found: dict[str, Any] = {}
    for name in sorted(names):
        module, attr = standard_name(name)
        try:
            found[name] = getattr(tests_view(importlib.import_module(module)), attr)
        except Exception:  # noqa: BLE001 - not installed in the trainer
            found[name] = NotInstalled(f"{module}.{attr}")
    return found


def doctest_view(module: Any, main: Any) -> Any:
    """``doctest`` as the tests use it, else ``module`` as it is: ``testmod()`` with no module tests
    theirs (``main``: the examples in their own docstrings, as a script run tests its ``__main__``),
    where it tested the trainer's ``__main__`` and no right solution passed; and any ``testmod`` whose
    examples fail raises AssertionError. Why the raise: a bare ``doctest.testmod()`` only prints its
    failures, so a cell of it checks nothing and, now that it asks the solution, a wrong one passed.
    The examples of the solution's own docstrings (``testmod(solution)``) are not read: they are
    the sample's claims about itself."""
    if getattr(module, "__name__", None) != "doctest" or not hasattr(module, "testmod"):
        return module

    def testmod(m: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = module.testmod(main if m is None else m, *args, **kwargs)
        if result.failed:
            raise AssertionError(f"{result.failed} of {result.attempted} doctest examples failed")
        return result
    return ModuleWithViews(module, {"testmod": testmod})
