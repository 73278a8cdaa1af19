"""The trainer's side of a test run: the dataset's tests execute here, never in the sample.

Names the solution defines become stand-ins here: a function is a ``Remote`` whose call is sent to
the sample with the arguments as typed values, and what comes back is rebuilt from exact built-in
types (``values.decode``) or is another ``Remote``. Comparisons, ``assert`` and the tests' helpers
all run in this process on those values, so nothing the sample does to its own interpreter
(patching builtins, writing to a descriptor, exiting, an ``__eq__`` that always agrees, printing
"passed") can turn a failed test into a pass. A ``Remote`` compares equal only to itself.

Limits (documented in ``polyrl.rewards.code``): arguments must be plain data or values the sample
returned (a lambda cannot be sent), and a test sees in-place changes to its arguments only through
values the sample returns. Builtins always mean the trainer's builtins: a solution cannot shadow
``sorted`` or ``isinstance`` for the tests. A module the solution imported is imported here by
name (standard library only), never taken from the sample; tests that use other packages import
them themselves (or in ``setup``).
"""

from __future__ import annotations

import builtins
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from polyrl.sandbox.channel import Channel, SampleStopped
from polyrl.sandbox.values import ProtocolError, decode, encode

#: Standard-library modules never imported on a sample's say-so (side effects on import).
UNSAFE_MODULES = frozenset({"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo",
                            "webbrowser", "pydoc", "__hello__", "__phello__", "ensurepip", "venv"})
_BUILTIN_NAMES = frozenset(dir(builtins))


class RemoteError(Exception):
    """An exception raised inside the sample whose type has no built-in counterpart here."""


class Remote:
    """A value that lives in the sample; every use of it is a request."""

    __slots__ = ("_session", "_ref", "_kind", "_type")

    def __init__(self, session: Session, ref: int, kind: str, type_name: str) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_type", type_name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        s = self._session
        return s.ask("call", ref=self._ref, args=[s.arg(a) for a in args],
                     kwargs={str(k): s.arg(v) for k, v in kwargs.items()})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol lookups (``__array__``, ...) stay local
        return self._session.ask("getattr", ref=self._ref, name=name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("values that live in the sample cannot be changed from the tests")

    def __getitem__(self, key: Any) -> Any:
        return self._session.ask("getitem", ref=self._ref, key=self._session.arg(key))

    def __len__(self) -> int:
        value = self._session.ask("len", ref=self._ref)
        if type(value) is not int:
            raise TypeError("len() of a sample's value is not an int")
        return value

    def __iter__(self) -> Any:
        return iter(self._session.ask("iter", ref=self._ref))

    def __bool__(self) -> bool:
        return self._session.ask("bool", ref=self._ref) is True

    def __str__(self) -> str:
        value = self._session.ask("str", ref=self._ref)
        if type(value) is not str:
            raise TypeError("str() of a sample's value is not a str")
        return value

    def __repr__(self) -> str:
        return f"<{self._type} in the sample>"

    def __reduce__(self) -> Any:
        raise TypeError("a sample's value cannot be pickled")


class Session:
    """Requests to one running sample, and the conversion of its answers."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.dirty = False

    def arg(self, value: Any) -> Any:
        if isinstance(value, Remote):
            if value._session is not self:
                raise TypeError("a value from another sample")
            return ["r", value._ref]
        data = encode(value)
        if data is not None:
            return data
        if type(value) in (list, tuple):
            return ["l" if type(value) is list else "t", [self.arg(v) for v in value]]
        raise TypeError(f"a {type(value).__name__} cannot be sent to the sample (only plain data)")

    def ask(self, op: str, **fields: Any) -> Any:
        self.dirty = True
        answer = self.channel.ask({"op": op, **fields})
        if answer.get("ok") is not True:
            raise remote_exception(answer.get("exc"))
        try:
            return self.value(answer.get("v"))
        except ProtocolError as exc:  # a malformed answer ends the sample: no test may catch it
            self.channel.dead = SampleStopped("crashed", f"protocol: {exc}")
            raise self.channel.dead from None

    def ask_raw_names(self) -> Any:
        answer = self.channel.ask({"op": "names"})
        if answer.get("ok") is not True:
            raise ProtocolError("the sample refused to list its names")
        return answer.get("v")

    def value(self, data: Any) -> Any:
        if isinstance(data, list) and data:
            tag = data[0]
            if tag == "r" and len(data) == 4 and type(data[1]) is int:
                return Remote(self, data[1], str(data[2]), str(data[3]))
            if tag == "m" and len(data) == 2 and isinstance(data[1], str):
                return local_module(data[1])
            if tag == "L" and len(data) == 2 and isinstance(data[1], list):
                return [self.value(item) for item in data[1]]
        return decode(data)

    def names(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ProtocolError("the sample's names are not a mapping")
        # never a builtin's name, never a dunder (``__builtins__`` would replace every builtin)
        return {name: self.value(value) for name, value in data.items()
                if type(name) is str and name.isidentifier() and name not in _BUILTIN_NAMES
                and not name.startswith("__")}


def remote_exception(exc: Any) -> BaseException:
    """The exception the sample raised, as a built-in type when there is one (so ``except
    ValueError`` in a test works), else ``RemoteError``; never a type that stops the trainer."""
    name, message = (exc if isinstance(exc, list) and len(exc) == 2 else ["RemoteError", str(exc)])
    kind = getattr(builtins, str(name), None)
    if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
        try:
            return kind(str(message))
        except Exception:  # noqa: BLE001 - a built-in exception needing other arguments
            pass
    return RemoteError(f"{name}: {message}")


class _Unavailable:
    """A module the solution imported that the tests cannot use from here."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise RemoteError(f"module {self._name!r} of the solution is not available to the tests")


def local_module(name: str) -> Any:
    """The trainer's own copy of a module the solution imported (never the sample's object)."""
    top = name.split(".")[0]
    if top in sys.stdlib_module_names and top not in UNSAFE_MODULES:
        if name in sys.modules:
            return sys.modules[name]
        try:
            return importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not importable here (or not a module name at all)
            pass
    return _Unavailable(name)


def run_tests(session: Session, hello: dict[str, Any], steps: Sequence[tuple[str, bool]],
              setup: str) -> list[bool]:
    """Run the steps here against the sample's names; one bool per test step."""
    namespace: dict[str, Any] = {"__name__": "tests", "__builtins__": builtins}
    installed: dict[str, Any] = {}

    def sync(data: Any) -> None:
        for name, value in session.names(data).items():
            if name not in namespace or (name in installed and namespace[name] is installed[name]):
                namespace[name] = installed[name] = value

    sync(hello.get("v"))
    if setup:
        try:
            exec(compile(setup, "<setup>", "exec"), namespace)
        except Exception:  # noqa: BLE001 - setup that fails here still ran in the sample
            pass
    passed: list[bool] = []
    for source, is_test in steps:
        ok = False
        if session.dirty:  # a call may have changed the sample's globals
            sync(session.ask_raw_names())
            session.dirty = False
        try:
            exec(compile(source, "<test>", "exec"), namespace)
            ok = True
        except SampleStopped:
            raise
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - any other failure of a test is a failed test
            ok = False
        if is_test:
            passed.append(ok)
    return passed
