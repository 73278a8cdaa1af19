"""pytest's fixtures ``capsys``, ``capfd`` and ``monkeypatch`` for the tests' own ``test_*`` functions.

Why: KodCode-style pytest cells check a solution that prints with ``def test_x(capsys): ...
capsys.readouterr().out``; called with no argument, the test raised TypeError, so a right solution
scored 0. A test naming one gets a ``Captured`` whose streams are ``sys.stdout``/``sys.stderr``
while it runs (``test_cells``); what the sample prints during its calls reaches them through the
harness (``harness.Session.printed``), so ``capfd`` (file descriptors, in pytest) is the same here.
``monkeypatch`` (``Patches``) was not given either: KodCode's ``monkeypatch.setattr('builtins.input',
lambda _: '5')`` raised TypeError; what it patches is undone when the test ends, and a patched
``input`` answers the sample's ``input()`` (``tests_input``). The tests' own fixtures (``own``,
with a ``Request`` where one reads ``request.param``) and xunit-style setups (``xunit``) are
made here too, as ``polyrl.rewards.test_calls`` calls them."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import os
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, NamedTuple

#: The fixtures a test function's parameter may name (``test_cells``) -> the function here that makes one.
FIXTURES = {"capsys": "capture", "capfd": "capture", "monkeypatch": "patching"}


class CaptureResult(NamedTuple):
    """``readouterr()``'s answer, as pytest's: what was printed since the last one."""

    out: str
    err: str


class Captured:
    """The text printed while a test runs, read as pytest's ``capsys`` reads it."""

    def __init__(self) -> None:
        self.out, self.err = io.StringIO(), io.StringIO()

    def readouterr(self) -> CaptureResult:
        """What was printed since the last call (pytest's), then forgotten."""
        result = CaptureResult(self.out.getvalue(), self.err.getvalue())
        for stream in (self.out, self.err):
            stream.seek(0)
            stream.truncate()
        return result


@contextlib.contextmanager
def capture() -> Iterator[Captured]:
    """A ``Captured`` holding ``sys.stdout``/``sys.stderr`` until the test ends, however it ends."""
    captured = Captured()
    with contextlib.redirect_stdout(captured.out), contextlib.redirect_stderr(captured.err):
        yield captured


_UNSET: Any = object()


class Patches:
    """pytest's ``monkeypatch`` as tests use it: ``setattr`` (of an object, or of a dotted
    ``'module.name'``), ``delattr``, ``setitem``, ``delitem``, ``setenv``, ``delenv``; ``undo``
    restores each in reverse order."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def setattr(self, target: Any, name: Any, value: Any = _UNSET, raising: bool = True) -> None:
        """``setattr(obj, 'name', value)`` or ``setattr('module.name', value)``."""
        if value is _UNSET:
            if not isinstance(target, str):
                raise TypeError("use setattr(target, name, value) or setattr('module.name', value)")
            target, name, value = *_resolved(target), name
        old = getattr(target, name, _UNSET)
        if old is _UNSET and raising:
            raise AttributeError(f"{target!r} has no attribute {name!r}")
        if isinstance(target, type):  # a class's own entry (a staticmethod stays one when restored)
            old = target.__dict__.get(name, _UNSET)
        setattr(target, name, value)
        self._undo.append(lambda: delattr(target, name) if old is _UNSET else setattr(target, name, old))

    def delattr(self, target: Any, name: Any = _UNSET, raising: bool = True) -> None:
        if name is _UNSET:
            if not isinstance(target, str):
                raise TypeError("use delattr(target, name) or delattr('module.name')")
            target, name = _resolved(target)
        if not hasattr(target, name):
            if raising:
                raise AttributeError(name)
            return
        old = getattr(target, name)
        delattr(target, name)
        self._undo.append(lambda: setattr(target, name, old))

    def setitem(self, mapping: MutableMapping[Any, Any], key: Any, value: Any) -> None:
        old = mapping.get(key, _UNSET)
        mapping[key] = value
        self._undo.append(lambda: mapping.pop(key, None) if old is _UNSET else mapping.__setitem__(key, old))

    def delitem(self, mapping: MutableMapping[Any, Any], key: Any, raising: bool = True) -> None:
        if key not in mapping:
            if raising:
                raise KeyError(key)
            return
        old = mapping.pop(key)
        self._undo.append(lambda: mapping.__setitem__(key, old))

    def setenv(self, name: str, value: Any, prepend: str | None = None) -> None:
        value = str(value)
        if prepend and name in os.environ:
            value = value + prepend + os.environ[name]
        self.setitem(os.environ, name, value)

    def delenv(self, name: str, raising: bool = True) -> None:
        self.delitem(os.environ, name, raising=raising)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


def _resolved(dotted: str) -> tuple[Any, str]:
    """``'pkg.mod.attr'`` as (the object holding ``attr``, ``'attr'``): the longest importable module
    prefix, then attributes, as pytest resolves it."""
    parts = dotted.split(".")
    if len(parts) < 2:
        raise ValueError(f"must be absolute import path string, not {dotted!r}")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            target = getattr(target, part)
        return target, parts[-1]
    raise ImportError(f"no module to patch in {dotted!r}")


@contextlib.contextmanager
def patching() -> Iterator[Patches]:
    """A ``Patches`` for one test, undone when it ends, however it ends."""
    patches = Patches()
    try:
        yield patches
    finally:
        patches.undo()


class Request:
    """pytest's ``request`` as a fixture of the tests' own reads it: ``param`` (a parametrized
    fixture's param for this test, ``@pytest.fixture(params=[...])`` or an ``indirect``
    parametrize case; AttributeError for any other fixture, as pytest's), ``param_index``,
    ``fixturename`` and ``addfinalizer`` (what it adds runs when the test ends, last added first).
    Why: a fixture reading ``request.param`` was left out and its test called without it, a
    TypeError, so every completion failed every param."""

    def __init__(self, fixturename: str, param: Any = _UNSET, param_index: int = 0) -> None:
        self.fixturename = fixturename
        self.param_index = param_index
        self._param = param
        self._finalizers: list[Callable[[], object]] = []

    @property
    def param(self) -> Any:
        if self._param is _UNSET:
            raise AttributeError(f"fixture {self.fixturename!r} is not parametrized: its request has no param")
        return self._param

    def addfinalizer(self, finalizer: Callable[[], object]) -> None:
        self._finalizers.append(finalizer)

    def finish(self) -> None:
        """Run what ``addfinalizer`` added, last first, each however the one before ended."""
        if not self._finalizers:
            return
        finalizer = self._finalizers.pop()
        try:
            finalizer()
        finally:
            self.finish()


@contextlib.contextmanager
def own(fixture: Any, **given: Any) -> Iterator[Any]:
    """The value of a fixture the tests define (``@pytest.fixture def data(): return [3, 1, 2]``)
    for one test, made with the fixtures it names (``given``; a method fixture of the test's class
    is given its instance as ``self``); a generator fixture's code after its ``yield`` runs when
    the test ends, however it ends, and then what its ``request.addfinalizer`` added. Why: a test
    naming one was called with no argument and raised TypeError, so every completion, right ones
    too, failed it. pytest refuses a fixture called directly, so its function is taken from
    pytest's wrapper."""
    requests = [value for value in given.values() if type(value) is Request]
    try:
        made = _fixture_function(fixture)(**given)
        if not inspect.isgenerator(made):
            yield made
            return
        value = next(made)
        try:
            yield value
        finally:
            with contextlib.suppress(StopIteration):
                next(made)
    finally:
        for request in requests:
            request.finish()


def xunit(function: Any, argument: Any) -> Any:
    """An xunit-style setup or teardown (``setup_function(function)``, ``setup_method(self,
    method)``) called as pytest calls it: with ``argument`` where it takes one, else with none."""
    try:
        takes = bool(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        takes = True
    return function(argument) if takes else function()


def xunit_module(function: Any, name: str) -> Any:
    """``setup_module(module)``/``teardown_module(module)`` (or unittest's ``setUpModule()``) with
    the tests' module (``tests_namespace.registered``) where it takes one."""
    import sys
    return xunit(function, sys.modules.get(name))


def _fixture_function(fixture: Any) -> Callable[..., Any]:
    """The function under pytest's fixture wrapper: ``_get_wrapped_function()`` (pytest 8.4 on),
    ``__pytest_wrapped__.obj`` (before), else the object itself (a fixture of another library)."""
    unwrap = getattr(fixture, "_get_wrapped_function", None)
    if callable(unwrap):
        return unwrap()
    wrapped = getattr(fixture, "__pytest_wrapped__", None)
    return getattr(wrapped, "obj", fixture)
