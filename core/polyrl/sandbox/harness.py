"""The trainer's side of a test run: the dataset's tests execute here, never in the sample.

Names the solution defines become stand-ins here: a function is a ``Remote`` whose call is sent to
the sample with the arguments as typed values, and what comes back is rebuilt from exact built-in
types (``values.decode``) or is another ``Remote``. Comparisons, ``assert`` and the tests' helpers
all run in this process on those values, so nothing the sample does to its own interpreter
(patching builtins, writing to a descriptor, exiting, an ``__eq__`` that always agrees, printing
"passed") can turn a failed test into a pass. A ``Remote`` compares equal only to itself.

Whose names: the tests' globals are theirs alone. The solution's names sit one layer below them,
in the namespace's builtins dict (under the trainer's real builtins), so whatever the tests or
``setup`` bind wins however equal it is to the sample's value (a module, a cached small int), and
a name their source binds anywhere is never the sample's, even before or when that binding fails
(``r = f(2)`` raising must not leave the sample's ``r`` for the next assert). Builtins always mean
the trainer's builtins: a solution cannot shadow ``sorted`` or ``isinstance`` for the tests.

Limits (documented in ``polyrl.rewards.code``): arguments must be plain data, values the sample
returned or a ``REBUILT`` standard value (a lambda cannot be sent), and a test sees in-place changes to its arguments only through
values the sample returns. A module the solution imported stands here for a read-only view of the
trainer's own copy when it is in ``SAFE_MODULES`` and is unusable otherwise: a name the sample
chose is never imported (``unittest.__main__`` runs tests on import). A name the tests use
without binding it is the solution's, except a well-known module name (``TEST_MODULES``: ``math``,
``re``, ``np``, ``pd``...) that the tests only use as a module (``math.isclose(...)``): that is
the trainer's real module, whatever the solution bound to it. Why: MBPP keeps ``import math`` in a
column of its own and numpy cells lean on the solution's ``import numpy as np``, so a solution
defining ``class math`` whose ``isclose`` always agrees scored 1. Likewise a standard function,
class or constant (``permutations``, ``reduce``, ``Counter``, ``ascii_lowercase``) the tests use as
a helper beside the task's function is the trainer's (``polyrl.sandbox.standard_names`` says
which), and is sent to the sample by name when a test passes it (``sort_by(xs, len)``). Tests
that use any other module import it themselves (or in ``setup``).
"""

from __future__ import annotations

import ast
import builtins
import collections
import decimal
import fractions
import functools
import importlib
import itertools
import operator
import symtable
import sys
import time
import types
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, MutableMapping, Sequence, Sized
from typing import Any

from polyrl.sandbox.channel import Channel, SampleStopped
from polyrl.sandbox.object_use import ANY_ROOT, object_roots, varied_query_roots
from polyrl.sandbox.standard_names import SOLUTION_MODULE, helper_names, standard_name, standard_object_name
from polyrl.sandbox.step_state import leaves_state
from polyrl.sandbox.values import MAX_DEPTH, ProtocolError, decode, encode, spread
from polyrl.sandbox.zip_sites import Site, indexed_sites, operand_groups

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
#: Standard types (``standard_names``') a test may pass to the solution: type -> (module, name, plain
#: data the sample's own constructor takes). Why: with ``deque`` the trainer's, a test's
#: ``rotate(deque([1, 2, 3]))`` could not be sent, and a right solution failed it.
REBUILT: dict[type, tuple[str, str, Callable[[Any], Any]]] = {
    collections.Counter: ("collections", "Counter", dict),
    collections.OrderedDict: ("collections", "OrderedDict", lambda v: list(v.items())),
    collections.deque: ("collections", "deque", list),
    collections.defaultdict: ("builtins", "dict", dict),  # its factory is the tests' code: a plain dict
    fractions.Fraction: ("fractions", "Fraction", str),
    decimal.Decimal: ("decimal", "Decimal", str),
}
#: Built-in types a test may pass that the sample makes from positional arguments: type ->
#: (module, name, the arguments). Why: ``total(range(5))`` and ``f(x)[:2]`` (a slice, on a numpy
#: array the solution returned) could not be sent, so right solutions failed them.
CONSTRUCTED: dict[type, tuple[str, str, Callable[[Any], list[Any]]]] = {
    range: ("builtins", "range", lambda r: [r.start, r.stop, r.step]),
    slice: ("builtins", "slice", lambda s: [s.start, s.stop, s.step]),
}
#: The same standard types coming back from the sample: (module, name) -> the constructor that
#: rebuilds one here from exact plain data (a defaultdict comes as a dict). Why: a Counter, deque,
#: Fraction the solution returned stayed in the sample, comparing equal to nothing, so a right
#: ``count(s)`` returning ``Counter(s)`` failed ``assert count(s) == Counter(s)``. Sound: the
#: value here is the trainer's own type, built from data (no method of the sample's answers).
_REBUILDERS: dict[tuple[str, str], Callable[[Any], Any]] = {
    (module, name): getattr(importlib.import_module(module), name) for module, name, _ in REBUILT.values()}
_BUILTIN_NAMES = frozenset(dir(builtins))
#: Python's warning for ``bool(NotImplemented)`` (``not_implemented_is_no_truth``), as a filter's pattern.
_NOT_IMPLEMENTED_TRUTH = "NotImplemented should not be used in a boolean context"
#: Most classes an exception class's lineage may name, and most stand-ins one sample may have made.
MAX_LINEAGE = 32
MAX_STAND_INS = 512
#: Most plain-data attributes of one exception the sample raised that the tests see (``exception_state``).
MAX_EXCEPTION_ATTRS = 32
#: Built-in exceptions a sample's call may raise here as themselves. Not StopIteration and
#: StopAsyncIteration: they are control flow (out of a call they end the tests' ``map`` early,
#: and ``all(map(f, xs))`` holds for any ``f``).
_EXCEPTIONS = {name: kind for name, kind in vars(builtins).items()
               if isinstance(kind, type) and issubclass(kind, Exception)
               and not issubclass(kind, (StopIteration, StopAsyncIteration))}


#: Yes/no methods of the built-in str, bytes, set and number types. A sample's object (a
#: ``Remote``) never answers them: a ``str`` or ``set`` the solution returns comes over as itself
#: and answers here, while a class of its own whose every method says yes passed ``assert
#: greet(n).startswith("Hi")``, ``assert evens(xs).issubset({2, 4})`` and ``assert
#: half(x).is_integer()`` (it sees the question before it answers).
DATA_PREDICATES = frozenset({"startswith", "endswith"} | {
    name for kind in (str, bytes, bytearray, set, frozenset, int, float) for name in dir(kind)
    if name.startswith("is") and not name.startswith("__")})
#: Queries of the built-in str, list and tuple types whose expected answer is often a fixed number
#: (``s.count(c) == 1`` for "no repeats", ``s.find(p) == 0`` for "starts with", ``-1`` for "not
#: there"). An object the sample returned from a call of one of its functions (``f(s)``: the tests
#: expect data from it, which comes over as itself) never answers them with arguments: an object
#: whose ``count`` always says 1 passed ``all(dedupe(s).count(c) == 1 for c in s)``. Other objects
#: of the sample's (its names' values, ``WORDS = Liar()``, and what a name spelled like a class
#: makes, ``Dedupe(s)``) answer them only where the tests use that name as an object
#: (``polyrl.sandbox.object_use``: ``uf = UnionFind(3); uf.union(0, 1); uf.find(0)``,
#: ``tally.add('a'); tally.count('a')``), or that are an instance of the class a name spelled like
#: a class is (``Words('a b a').count('a') == 2``) where the tests ask its queries only with
#: constant arguments outside loops (in a loop the expected answer is the same for every
#: argument, what the forgery gives: ``all(Dedupe(s).count(c) == 1 for c in s)`` of a ``class
#: Dedupe`` whose ``count`` says 1). Without arguments (``Stack().count()``) no str or list
#: answers them, so the object does; any other method too (``f(x).equals(y)`` expects an object,
#: whose own answer it is).
DATA_QUERIES = frozenset({"count", "index", "find", "rfind", "rindex"})
#: Built-in data types, whose own ``__eq__`` never compares with a ``Remote``.
_PLAIN_TYPES = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
                          frozenset})


class RemoteError(Exception):
    """An exception raised inside the sample whose type has no built-in counterpart here."""


class Remote:
    """A value that lives in the sample; every use of it is a request.

    ``_data``: the tests expect built-in data from it (what a call returned, unless the callee is a
    solution name spelled like a class, or anything read from such a value); ``_origin``: the name
    it has among the solution's names, if any; ``_root``: the solution's name it was reached from;
    ``_query``: a ``DATA_QUERIES`` method that refuses to be called with arguments (see there)."""

    __slots__ = ("_session", "_ref", "_kind", "_type", "_data", "_origin", "_root", "_query", "_made")

    def __init__(self, session: Session, ref: int, kind: str, type_name: str, data: bool = False,
                 origin: str | None = None, root: str | None = None) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_type", type_name)
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_origin", origin)
        object.__setattr__(self, "_root", origin or root)
        object.__setattr__(self, "_query", False)
        object.__setattr__(self, "_made", False)

    def _gives_data(self) -> bool:
        """Whether what calling it returns is data to the tests: anything but a solution name
        spelled like a class (``Stack(3)``, ``UnionFind(5)``); a function (``f``, ``make_list``) or
        a method (``Solution().dedupe(s)``, LeetCode's shape) returns data."""
        return self._origin is None or self._origin[:1].islower()

    def _answers_queries(self) -> bool:
        """Whether its own ``DATA_QUERIES`` methods answer with arguments (see there): never for
        data the tests expect; for an object the tests use as one (``object_use.object_roots``),
        or an instance the tests made of a solution's class they name (``Words('a b a')``) where
        they ask it only with constant arguments outside loops (``object_use.varied_query_roots``)."""
        s = self._session
        if self._data:
            return False
        return self._root in s.objects or (self._made and not {self._root, ANY_ROOT} & s.varied)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._query and (args or kwargs):
            raise AttributeError(f"the sample's {self._type[:100]!r} object answers no str/list query "
                                 f"({', '.join(sorted(DATA_QUERIES))}) here: only a str, list or tuple it returns "
                                 "as a value does, or an object the tests use as one")
        s = self._session
        value = s.ask("call", self._gives_data(), root=self._root, ref=self._ref, args=[s.arg(a) for a in args],
                      kwargs={str(k): s.arg(v) for k, v in kwargs.items()})
        if isinstance(value, Remote) and not self._gives_data() and value._type == self._origin:
            object.__setattr__(value, "_made", True)  # ``Words('a b a')``: an instance of the class named
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol lookups (``__array__``, ...) stay local
        if name in DATA_PREDICATES:
            raise AttributeError(f"{name}() of the sample's {self._type[:100]!r} object: only a str, bytes, set or "
                                 "number it returns as a value answers it")
        s = self._session
        value = s.ask("getattr", self._data, root=self._root, ref=self._ref, name=name)
        if isinstance(value, Remote) and name in DATA_QUERIES and not self._answers_queries():
            object.__setattr__(value, "_query", True)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("values that live in the sample cannot be changed from the tests")

    def __getitem__(self, key: Any) -> Any:
        return self._session.ask("getitem", self._data, root=self._root, ref=self._ref, key=self._session.arg(key))

    def __len__(self) -> int:
        value = self._session.ask("len", False, ref=self._ref)
        if type(value) is not int:
            raise TypeError("len() of a sample's value is not an int")
        return value

    def __iter__(self) -> Any:
        return iter(self._session.ask("iter", self._data, root=self._root, ref=self._ref))

    def __next__(self) -> Any:
        """The next item of an iterator the solution returned (``next(f(x))`` of a generator;
        ``for`` and ``list`` go through ``__iter__``). Its end is a ``RemoteError``, never
        StopIteration, which would end a ``map`` of the tests' early (``_EXCEPTIONS``). Why: a
        right generator failed ``assert next(gen(3)) == 0`` ("'Remote' object is not an iterator")."""
        return self._session.ask("next", self._data, root=self._root, ref=self._ref)

    def __bool__(self) -> bool:
        return self._session.ask("bool", False, ref=self._ref) is True

    def __str__(self) -> str:
        value = self._session.ask("str", False, ref=self._ref)
        if type(value) is not str:
            raise TypeError("str() of a sample's value is not a str")
        return value

    def __eq__(self, other: object) -> Any:
        """Itself only. False, not NotImplemented, against built-in data, which never compares
        with it: NotImplemented is truthy, so ``assert f(x).__eq__("abc")`` held for any object;
        other types (numpy arrays, ``pytest.approx``) still get their reflected turn."""
        if self is other:
            return True
        return False if type(other) in _PLAIN_TYPES else NotImplemented

    def __ne__(self, other: object) -> Any:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<{self._type[:100]} in the sample>"

    def __reduce__(self) -> Any:
        raise TypeError("a sample's value cannot be pickled")


class Session:
    """Requests to one running sample, and the conversion of its answers."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.dirty = False
        self.asks = 0  # requests to the sample: a test that made none never looked at it
        self.read_plain = False  # a plain value of the sample's was read through the solution module
        self.plain_names: set[str] = set()  # the sample's names that came over as plain values
        self.objects: frozenset[str] = frozenset()  # names the tests use as objects (``object_use``)
        self.varied: frozenset[str] = frozenset()  # names the tests ask queries in loops (``object_use``)
        self.stand_ins: dict[tuple[tuple[str, str], ...], type[BaseException]] = {}  # ``exception_class``
        self.class_refs: dict[type, int] = {}  # a stand-in of one of the sample's names -> its class there

    def arg(self, value: Any) -> Any:
        if isinstance(value, Remote):
            if value._session is not self:
                raise TypeError("a value from another sample")
            return ["r", value._ref]
        if isinstance(value, type) and value in self.class_refs:  # ``issubclass(catch(f), SolutionError)``
            return ["r", self.class_refs[value]]
        data = encode(value)
        if data is not None:
            return data
        if type(value) in (list, tuple):
            return ["l" if type(value) is list else "t", [self.arg(v) for v in value]]
        rebuilt = REBUILT.get(type(value))
        if rebuilt is not None:  # the sample makes its own of the same type from plain data
            module, name, plain = rebuilt
            return ["x", module, name, self.arg(plain(value))]
        constructed = CONSTRUCTED.get(type(value))
        if constructed is not None:
            module, name, args = constructed
            return ["X", module, name, [self.arg(a) for a in args(value)]]
        stand_in = _STAND_INS.get(value.__code__) if isinstance(value, types.FunctionType) else None
        standard = ("builtins", stand_in) if stand_in is not None else standard_object_name(value)
        if standard is not None:  # a standard function, class or constant: the sample's own copy of it
            return ["g", *standard]
        raise TypeError(f"a {type(value).__name__} cannot be sent to the sample (only plain data)")

    def ask(self, op: str, data: bool, root: str | None = None, **fields: Any) -> Any:
        """The sample's answer to one request; ``data``, ``root``: ``Remote._data`` and
        ``Remote._root`` of a ``Remote`` in it."""
        self.dirty = True
        self.asks += 1
        answer = self.channel.ask({"op": op, **fields})
        if answer.get("ok") is not True:
            raise remote_exception(answer.get("exc"), self.exception_class)
        return self._decoded(lambda v: self.value(v, data=data, root=root), answer.get("v"))

    def ask_raw_names(self) -> Any:
        answer = self.channel.ask({"op": "names"})
        if answer.get("ok") is not True:
            raise ProtocolError("the sample refused to list its names")
        return answer.get("v")

    def _decoded(self, read: Callable[[Any], Any], data: Any) -> Any:
        """``read(data)``; whatever that raises (even a BaseException: SystemExit, RecursionError,
        ...) ends this sample as "crashed" with the reason, and is no exception a test may catch.
        KeyboardInterrupt too: samples are scored on worker threads, where no signal lands."""
        try:
            return read(data)
        except BaseException as exc:  # noqa: BLE001 - the sample's bytes must not stop the trainer
            self.channel.dead = SampleStopped("crashed", f"protocol: {exception_text(exc)}")
            raise self.channel.dead from None

    def value(self, encoded: Any, depth: int = 0, data: bool = False, origin: str | None = None,
              root: str | None = None) -> Any:
        """The value an answer describes (``data``, ``origin``, ``root``: see ``Remote``)."""
        if depth > MAX_DEPTH:
            raise ProtocolError("nested too deep")
        if isinstance(encoded, list) and encoded:
            tag = encoded[0]
            if tag == "r" and len(encoded) == 4 and type(encoded[1]) is int and type(encoded[2]) is str \
                    and type(encoded[3]) is str:
                return Remote(self, encoded[1], encoded[2], encoded[3], data=data, origin=origin, root=root)
            if tag == "m" and len(encoded) == 2 and type(encoded[1]) is str:
                return local_module(encoded[1])
            if tag == "N" and len(encoded) == 2:
                return named_tuple(decode(encoded[1], depth + 1))
            if tag == "E" and len(encoded) == 3 and type(encoded[1]) is int:
                kind = self.exception_class(encoded[2])
                if kind is None:
                    raise ProtocolError("a malformed exception class")
                if kind.__module__ == SOLUTION_MODULE:  # a stand-in made here, never a built-in class
                    self.class_refs.setdefault(kind, encoded[1])
                return kind
            if tag == "x" and len(encoded) == 4 and type(encoded[1]) is str and type(encoded[2]) is str \
                    and (encoded[1], encoded[2]) in _REBUILDERS:
                return rebuilt(encoded[1], encoded[2], decode(encoded[3], depth + 1))
            if tag == "L" and len(encoded) == 2 and isinstance(encoded[1], list):
                return spread([self.value(item, depth + 1, data, root=root) for item in encoded[1]])
        return decode(encoded)

    def exception_class(self, lineage: Any) -> type[BaseException] | None:
        """The trainer's stand-in for an exception class of the sample's, from its MRO as
        ``[module, name]`` pairs (``server._lineage``), or None when that is malformed: a plain
        class of that name deriving from the stand-in of the next class, down to the first
        built-in exception (``RemoteError`` for one that is no ``_EXCEPTIONS``: ``SystemExit``,
        ``StopIteration``, ``BaseException``). One class per lineage and sample, the same for the
        sample's name and for what it raised. Why: a solution's ``SolutionError`` was a handle no
        ``except``, ``pytest.raises`` or ``assertRaises`` takes, and what it raised came as a
        ``RemoteError``, so right solutions failed every such test (and ``class E(ValueError)``
        raised failed ``pytest.raises(ValueError)``). Nothing of the sample's runs in it."""
        if not (isinstance(lineage, list) and 0 < len(lineage) <= MAX_LINEAGE and all(
                isinstance(p, list) and len(p) == 2 and type(p[0]) is str and type(p[1]) is str
                and len(p[0]) <= 100 and len(p[1]) <= 100 for p in lineage)):
            return None
        return self._stand_in(tuple((module, name) for module, name in lineage))

    def _stand_in(self, lineage: tuple[tuple[str, str], ...]) -> type[BaseException] | None:
        if not lineage:
            return RemoteError
        (module, name), rest = lineage[0], lineage[1:]
        if module == "builtins":
            return _EXCEPTIONS.get(name, RemoteError)
        if not name.isidentifier():  # no class of that name here: the next one stands for it
            return self._stand_in(rest)
        made = self.stand_ins.get(lineage)
        if made is None:
            base = self._stand_in(rest)
            if base is None or len(self.stand_ins) >= MAX_STAND_INS:
                return None
            try:
                made = type(name, (base,), {"__module__": SOLUTION_MODULE})
            except TypeError:  # a base that takes no subclass: no stand-in
                return None
            self.stand_ins[lineage] = made
        return made

    def names(self, data: Any) -> dict[str, Any]:
        """The sample's global names as stand-ins; a malformed listing ends the sample."""
        return self._decoded(self._names, data)

    def _names(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ProtocolError("the sample's names are not a mapping")
        # never a builtin's name, never a dunder (``__builtins__`` would replace every builtin)
        names = {name: self.value(value, origin=name) for name, value in data.items()
                 if type(name) is str and name.isidentifier() and name not in _BUILTIN_NAMES
                 and not name.startswith("__")}
        self.plain_names |= {name for name, value in names.items()
                             if not isinstance(value, (Remote, ModuleView, _Unavailable))}
        return names


class SolutionModule:
    """What ``import solution`` / ``from solution import add`` give the tests: the sample's names,
    read when used. Why: tests written to import the solution from a module (KodCode's) bound
    ``add`` themselves, so the sample's ``add`` was never seen and every completion scored 0.
    ``from solution import *`` binds nothing (``__all__`` is empty): the names it would bring are
    the sample's already, below the tests' own (module doc), and binding them would put the
    sample's ``permutations`` over the trainer's standard one. Without ``__all__`` the import
    raised, so every completion failed such a cell."""

    __slots__ = ("_session", "_names")
    __all__: tuple[str, ...] = ()

    def __init__(self, session: Session, names: dict[str, Any]) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_names", names)

    def __getattr__(self, name: str) -> Any:
        if name not in self._names:
            raise AttributeError(f"the solution defines no {name!r}")
        value = self._names[name]
        if not isinstance(value, (Remote, ModuleView, _Unavailable)):
            object.__setattr__(self._session, "read_plain", True)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("the solution's names cannot be changed from the tests")

    def __repr__(self) -> str:
        return f"<module {SOLUTION_MODULE!r} (the sample's names)>"


def rebuilt(module: str, name: str, plain: Any) -> Any:
    """The standard value (``_REBUILDERS``) a sample sent as plain data, from data of the one shape
    its constructor is sent (``server._STANDARD``), else ``ProtocolError``. Why the shape: an
    ``OrderedDict`` (or dict) built from a list of pairs hashes keys no ``spread`` has seen, and
    30k colliding keys held the trainer for seconds, as a set of them did (``values.MAX_SAME_HASH``)."""
    if name in ("Fraction", "Decimal"):
        ok = type(plain) is str
    elif name == "OrderedDict":
        ok = type(plain) is list and all(type(p) is tuple and len(p) == 2 for p in plain)
        if ok:
            spread([key for key, _ in plain])
    else:
        ok = type(plain) is (list if name == "deque" else dict)
    if not ok:
        raise ProtocolError(f"a {name} sent as {type(plain).__name__}")
    return _REBUILDERS[module, name](plain)


def named_tuple(data: Any) -> tuple[Any, ...]:
    """A namedtuple the solution returned, as an instance of the trainer's own namedtuple class
    of that name and fields (``(name, fields, values)``, plain data), else ``ProtocolError``.
    Why: it stayed in the sample, equal to nothing, so a right ``pt(1, 2)`` failed ``== (1, 2)``;
    the class here has a tuple's equality, whatever the sample's said."""
    if not (type(data) is tuple and len(data) == 3 and type(data[0]) is str and type(data[1]) is tuple
            and type(data[2]) is tuple and len(data[1]) == len(data[2]) <= 255
            and all(type(f) is str for f in data[1])):
        raise ProtocolError("a malformed namedtuple")
    return _named_class(data[0], data[1])(*data[2])


@functools.lru_cache(maxsize=64)
def _named_class(name: str, fields: tuple[str, ...]) -> Any:
    return collections.namedtuple(name, fields)  # checks that every name is an identifier


def remote_exception(exc: Any, classes: Callable[[Any], type[BaseException] | None] | None = None) -> BaseException:
    """The exception the sample raised: an instance of the stand-in ``classes`` gives for its
    class's lineage (``Session.exception_class``), else of the built-in type of its name when
    there is one (so ``except ValueError`` in a test works), else ``RemoteError``; never a type
    that stops the trainer or steers the tests' control flow (see ``_EXCEPTIONS``). It carries
    the plain data the sample sent of it (``exception_state``)."""
    name, message = exception_parts(exc)
    kind = classes(exc[2]) if classes is not None and isinstance(exc, list) and len(exc) >= 3 else None
    if kind is None or kind is RemoteError:
        kind = _EXCEPTIONS.get(name)
    if kind is not None:
        args, attrs = exception_state(exc)
        made = _exception_of(kind, message, args)
        if made is not None:
            for attr, value in attrs.items():
                if not hasattr(kind, attr):  # never over the class's own (``args``, ``with_traceback``)
                    setattr(made, attr, value)
            return made
    return RemoteError(f"{name}: {message}")


def _exception_of(kind: type[BaseException], message: str, args: tuple[Any, ...] | None) -> BaseException | None:
    """``kind(*args)`` when its text is the sample's message (so ``e.args == (404, 'gone')`` and a
    KeyError's text hold as in the sample), else ``kind(message)``, else None."""
    if args is not None:
        try:
            made = kind(*args)
            if str(made) == message:
                return made
        except Exception:  # noqa: BLE001 - arguments this class does not take: the message then
            pass
    try:
        return kind(message)
    except Exception:  # noqa: BLE001 - a built-in exception needing other arguments
        return None


def exception_state(exc: Any) -> tuple[tuple[Any, ...] | None, dict[str, Any]]:
    """(``args``, instance attributes) of an exception the sample described, as plain data
    (``values.decode``: exact built-in types only; anything malformed is left out). Why: only the
    message crossed, so a right solution failed ``with pytest.raises(AppError) as e: ...; assert
    e.value.code == 404``. Never a pickle, never an object of the sample's."""
    state = exc[3] if isinstance(exc, list) and len(exc) == 4 and isinstance(exc[3], dict) else {}
    args: tuple[Any, ...] | None = None
    attrs: dict[str, Any] = {}
    try:
        decoded = decode(state["args"]) if state.get("args") is not None else None
        args = decoded if type(decoded) is tuple else None
    except ProtocolError:
        pass
    pairs = state.get("attrs")
    for pair in pairs[:MAX_EXCEPTION_ATTRS] if isinstance(pairs, list) else ():
        if isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is str and len(pair[0]) <= 100 \
                and pair[0].isidentifier() and not pair[0].startswith("__"):
            try:
                attrs[pair[0]] = decode(pair[1])
            except ProtocolError:
                continue
    return args, attrs


def exception_parts(exc: Any) -> tuple[str, str]:
    """(type name, message) of an exception the sample described as ``[name, message, ...]``
    (``server._describe``), bounded; anything else in that place is described, never converted
    (``str`` of a deep list raises)."""
    if isinstance(exc, list) and len(exc) in (2, 3, 4) and type(exc[0]) is str and type(exc[1]) is str:
        return exc[0][:100], exc[1][:300]
    return "RemoteError", "the sample described its exception in a malformed way"


def exception_text(exc: BaseException) -> str:
    """``Type: message`` of an exception raised here, bounded, even when its ``str`` fails."""
    try:
        text = str(exc)[:200]
    except BaseException:  # noqa: BLE001 - an exception whose str() fails
        text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Unavailable:
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


class ModuleView:
    """A trainer's module as the tests see it for a solution's import: attributes read through,
    no change (the module is shared with every later sample, and the sample chose the name)."""

    __slots__ = ("_module",)

    def __init__(self, module: Any) -> None:
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name not in ("__name__", "__all__"):
            raise AttributeError(name)  # ``__dict__`` would be a way to change the module
        return getattr(self._module, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"module {self._module.__name__!r} cannot be changed through the solution's import")

    def __delattr__(self, name: str) -> None:
        raise TypeError(f"module {self._module.__name__!r} cannot be changed through the solution's import")

    def __dir__(self) -> list[str]:
        return dir(self._module)

    def __repr__(self) -> str:
        return f"<module {self._module.__name__!r} (read-only)>"


class BuiltinsView:
    """The ``builtins`` module as the tests' ``import builtins`` gives it: the real module, but
    their own ``zip``/``map``/``filter``/``enumerate`` (``tests_pairing``). Why: ``builtins.zip(f(2), [1.0])``
    was Python's zip, vacuous on ``return []``. Setting an attribute sets the real module's, as
    before, and from then on reads it back."""

    __slots__ = ("_own",)

    def __init__(self, own: dict[str, Any]) -> None:
        object.__setattr__(self, "_own", own)

    def __getattr__(self, name: str) -> Any:
        own = object.__getattribute__(self, "_own")
        if name == "__dict__":  # ``builtins.__dict__['zip']``: theirs too, what they write read back here
            return collections.ChainMap(own, vars(builtins))
        return own[name] if name in own else getattr(builtins, name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_own").pop(name, None)
        setattr(builtins, name, value)

    def __delattr__(self, name: str) -> None:
        object.__getattribute__(self, "_own").pop(name, None)
        delattr(builtins, name)

    def __dir__(self) -> list[str]:
        return dir(builtins)

    def __repr__(self) -> str:
        return "<module 'builtins' (built-in)>"


class ModuleWithViews:
    """A module as the tests see it: the real one, read and written through, but for some names
    of their own (``tests_view``)."""

    __slots__ = ("_module", "_own")

    def __init__(self, module: Any, own: dict[str, Any]) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_own", own)

    def __getattr__(self, name: str) -> Any:
        own = object.__getattribute__(self, "_own")
        return own[name] if name in own else getattr(object.__getattribute__(self, "_module"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_own").pop(name, None)
        setattr(object.__getattribute__(self, "_module"), name, value)

    def __delattr__(self, name: str) -> None:
        object.__getattribute__(self, "_own").pop(name, None)
        delattr(object.__getattribute__(self, "_module"), name)

    def __dir__(self) -> list[str]:
        return dir(object.__getattribute__(self, "_module"))

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_module"))


class ModulesView(MutableMapping[str, Any]):
    """``sys.modules`` as the tests see it: the real mapping, but for the views named (``tests_view``)."""

    def __init__(self, views: dict[str, Any]) -> None:
        self._views = views

    def __getitem__(self, name: str) -> Any:
        return self._views[name] if name in self._views else sys.modules[name]

    def __setitem__(self, name: str, module: Any) -> None:
        self._views.pop(name, None)
        sys.modules[name] = module

    def __delitem__(self, name: str) -> None:
        self._views.pop(name, None)
        del sys.modules[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(sys.modules))

    def __len__(self) -> int:
        return len(sys.modules)


#: numpy's yes/no comparisons of two arrays, which reduce over their elements (``NumpyChecks``);
#: numpy.testing's ``assert_*`` besides.
NUMPY_CHECKS = frozenset({"allclose", "array_equal", "array_equiv"})
#: numpy's elementwise comparisons, and the difference tests take before a norm or sum: of an
#: empty operand and one with elements (a scalar too) they give an empty result, of which every
#: reduction holds (``all()``; ``not any()`` of ``!=``; ``np.linalg.norm(r - 2.0) < 1e-9``).
NUMPY_COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "isclose",
                               "subtract"})


class NumpyChecks(ModuleView):
    """numpy or numpy.testing as the tests see it (read-only), whose checks never hold vacuously:
    one operand with no elements and the other with some fails them. Why: ``np.allclose([],
    3.14)`` and ``np.testing.assert_allclose([], 3.14)`` hold (no element differs), so ``def
    area(r): return []`` passed ``np.allclose(area(1), 3.14159)``. Its other functions give an
    array with no elements as an ``EmptyArray``, so a reduction the tests write themselves fails
    too (``(np.array(area(1)) == 3).all()``, ``np.isclose(f(x), [1.0]).all()``)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)
        testing = self._module.__name__ == "numpy.testing"
        if getattr(value, "__name__", None) == "numpy.testing" and not callable(value):
            return NumpyChecks(value)
        if not callable(value) or isinstance(value, type):  # a class stays itself (``isinstance(x, np.ndarray)``)
            return value
        if name in NUMPY_CHECKS or (testing and name.startswith("assert_")):
            return NumpyFunction(value, "false" if name in NUMPY_CHECKS else "raise")
        return NumpyFunction(value, "raise" if name in NUMPY_COMPARISONS else None)


class NumpyFunction:
    """A numpy function as the tests call it: ``EmptyArray`` operands go in as plain arrays (numpy's
    own code compares them freely), an array result with no elements comes out as an
    ``EmptyArray``, and a check (``fails``: "false" returns False, "raise" raises AssertionError)
    of two operands fails when exactly one of them has no elements. Anything else read from it
    (a ufunc's ``reduce``, ``outer``) is the function's own."""

    __slots__ = ("_function", "_fails")

    def __init__(self, function: Callable[..., Any], fails: str | None) -> None:
        self._function = function
        self._fails = fails

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tuple(map(plain_array, args))
        kwargs = {key: plain_array(value) for key, value in kwargs.items()}
        if self._fails is not None and len(args) >= 2 and one_empty(args[:2]):
            if self._fails == "false":
                return False
            raise AssertionError(f"{getattr(self._function, '__name__', 'numpy')}: one operand has no elements "
                                 "and the other has some")
        return empty_array(self._function(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)

    def __repr__(self) -> str:
        return repr(self._function)


def one_empty(operands: Iterable[Any]) -> bool:
    """Whether some of ``operands`` have no elements as arrays and some have elements."""
    asarray = sys.modules["numpy"].asarray
    empty = {_is_empty(value, asarray) for value in operands}
    return len(empty) == 2


def _is_empty(value: Any, asarray: Callable[[Any], Any]) -> bool:
    """Whether ``value`` as an array has no elements: never its own ``size`` (a sample's object
    answers that as it likes; ``np.size`` asks it)."""
    try:
        return asarray(value).size == 0
    except Exception:  # noqa: BLE001 - not an array-like: the check itself decides
        return False


def empty_array(value: Any) -> Any:
    """``value``, or as an ``EmptyArray`` when it is a plain numpy array with no elements."""
    numpy = sys.modules["numpy"]
    if type(value) is numpy.ndarray and value.size == 0:
        return value.view(_empty_array_class(numpy))
    return value


def plain_array(value: Any) -> Any:
    """``value``, or the plain numpy array an ``EmptyArray`` views."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, _empty_array_class(numpy)):
        return value.view(numpy.ndarray)
    return value


@functools.cache
def _empty_array_class(numpy: Any) -> Any:
    """``EmptyArray``: a numpy array with no elements that the tests made through numpy
    (``NumpyChecks``). Compared elementwise with an operand that has elements (``== 3``, ``<``,
    ``!=``) it raises AssertionError, where numpy gives an empty result every reduction
    (``.all()``, ``np.all``, ``all()``) holds: ``def area(r): return []`` passed ``assert
    (np.array(area(1)) == 3).all()``. Compared with another empty array it compares as numpy does
    (``np.array(f([])) == np.array([])``); every other operation keeps it an ``EmptyArray``."""

    class EmptyArray(numpy.ndarray):
        def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
            inputs = tuple(map(plain_array, inputs))
            if "out" in kwargs:
                kwargs["out"] = tuple(map(plain_array, kwargs["out"]))
            if method == "__call__" and ufunc.__name__ in NUMPY_COMPARISONS and one_empty(inputs):
                raise AssertionError(f"{ufunc.__name__}: an array with no elements compared with one that has some")
            return empty_array(getattr(ufunc, method)(*inputs, **kwargs))

    return EmptyArray


#: The sized operands the tests' ``zip`` and ``map`` measure (a sample's iterable is read in full
#: first, as Python's own ``zip`` would); other iterators go through untouched, except one known to
#: be empty (``_empty_iterator``). A dict's views and a deque besides: ``zip(f(2), expected.values())``
#: held for ``return []``.
_SIZED_TYPES: tuple[type[Sized], ...] = (list, tuple, str, bytes, range, dict, set, frozenset, type({}.keys()),
                                         type({}.values()), type({}.items()), collections.deque)
#: Where the tests' code runs (``run_tests`` compiles the steps and setup under these names).
_TESTS_FILES = ("<test>", "<setup>")


#: Iterators of built-in containers, whose ``__length_hint__`` is the exact number of items left
#: (read without consuming one): what ``iter``, ``reversed`` and ``for`` make of a list, tuple,
#: range, str, bytes, dict or set, and ``reversed`` of a sequence (its count is the index left).
_EXACT_ITERATORS: frozenset[type] = frozenset({*map(type, (
    iter([]), reversed([]), iter(()), iter(range(0)), reversed(range(0)), iter(""), iter("\u00e9"), iter(b""),
    iter({}), iter({}.values()), iter({}.items()), reversed({}), iter(set()), reversed(range(1 << 70)))), reversed})


class _Mapped(map):
    """The tests' ``map`` over one operand: Python's, knowing its operand (``_empty_iterator``)."""

    __slots__ = ("_source",)
    _source: Any


class _Filtered(filter):
    """The tests' ``filter``: Python's, knowing its operand (``_empty_iterator``)."""

    __slots__ = ("_source",)
    _source: Any


class _Enumerated(enumerate):
    """The tests' ``enumerate``: Python's, knowing its operand (``_empty_iterator``)."""

    __slots__ = ("_source",)
    _source: Any


def _enumerated(source: Iterator[Any], start: int) -> Any:
    """``enumerate`` as the tests see it (``tests_pairing``): Python's, whose operand ``_paired``
    can see is empty (``zip(enumerate(f(2)), enumerate(expected))``)."""
    numbered = _Enumerated(source, start)
    numbered._source = source
    return numbered


def tests_filter(function: Any, iterable: Any) -> Any:
    """``filter`` as the tests see it: Python's, whose operand ``_paired`` can see is empty."""
    source = iter(iterable)
    filtered = _Filtered(function, source)
    filtered._source = source
    return filtered


def _empty_iterator(value: Any) -> bool:
    """Whether ``value`` is an iterator known, without taking an item, to have none left: a
    built-in container's (``iter(r)``, ``reversed(r)``) or the tests' ``map``/``filter``/``enumerate``
    over one.
    Why: ``zip(iter(f(2)), [1.0, 2.0])`` and ``zip(map(float, f(2)), expected)`` held for ``return
    []``. One with items stays unmeasured (``zip(f([]), iter([1, 2]))`` is right for an empty
    answer, and an iterator may be endless)."""
    if type(value) in (_Mapped, _Filtered, _Enumerated):
        return _empty_iterator(value._source)
    return type(value) in _EXACT_ITERATORS and operator.length_hint(value) == 0


def _sized_length(value: Any) -> int | None:
    """The number of items ``zip`` takes from ``value``, or None when it is not a sized operand
    (0 for an iterator known to be empty: ``_empty_iterator``)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return len(value) if value.ndim else None
    if isinstance(value, _SIZED_TYPES):
        return len(value)
    return 0 if _empty_iterator(value) else None


def tests_pairing(sources: Sequence[tuple[str, str]]) -> tuple[Callable[..., Any], ...]:
    """``zip``, ``map``, ``enumerate`` and ``len`` as the tests of ``sources`` ((filename, text) as ``run_tests`` compiles
    them) see them: an empty operand fails beside one with items that comes from elsewhere. Why:
    ``all(a == b for a, b in zip(f(2), expected))`` and ``all(map(operator.eq, f(2), expected))``
    hold vacuously, so ``return []`` (or a generator, an object of the sample's, yielding nothing)
    passed. Where the operands come from is ``zip_sites.operand_groups``' (found the first time
    it matters): ``zip(r, r[1:])`` on a one-item ``r`` pairs one value with itself and passes; at a
    place it cannot name (``map(zip, ...)``, Python before 3.11) an empty operand fails beside one
    of two or more items only, so the pairwise idiom passes there too. An iterator over the answer
    (``iter(r)``, ``reversed(r)``, the tests' ``map(float, r)``) counts as empty when it has no items
    left (``_empty_iterator``), any other iterator when zip or map ends before its first item
    because it had none (``_watched``); ``import builtins`` gives these too (``BuiltinsView``).
    The third and fourth are their ``enumerate`` and ``len``: over an empty answer (``for i in
    range(len(r))``) they fail where the loop indexes a value of the tests' with items by its count
    (``_check_indexed``)."""
    sites = functools.cache(lambda: operand_groups(sources))

    def zip_(*iterables: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        place = (frame.f_code, frame.f_lasti)
        return _watched("zip", zip, _paired("zip", iterables, place, sites), kwargs, place, sites)

    def map_(function: Any, *iterables: Any, **kwargs: Any) -> Any:
        if len(iterables) >= 2:
            frame = sys._getframe(1)
            place = (frame.f_code, frame.f_lasti)
            paired = _paired("map", iterables, place, sites)
            return _watched("map", functools.partial(map, function), paired, kwargs, place, sites)
        if len(iterables) != 1 or kwargs:
            return map(function, *iterables, **kwargs)
        source = iter(iterables[0])
        mapped = _Mapped(function, source)
        mapped._source = source
        return mapped

    indexed = functools.cache(lambda: indexed_sites(sources))

    def enumerate_(iterable: Any, start: int = 0) -> Any:
        source = iter(iterable)
        if _empty_iterator(source):
            frame = sys._getframe(1)
            position = _position((frame.f_code, frame.f_lasti))
            if position is not None:
                _check_indexed(indexed().get(("enumerate", *position)), frame)
        return _enumerated(source, start)

    def len_(value: Any) -> int:
        length = len(value)
        if length == 0:
            frame = sys._getframe(1)
            position = _position((frame.f_code, frame.f_lasti))
            if position is not None:
                _check_indexed(indexed().get(("len", *position)), frame)
        return length

    zip_.__name__ = zip_.__qualname__ = "zip"
    map_.__name__ = map_.__qualname__ = "map"
    enumerate_.__name__ = enumerate_.__qualname__ = "enumerate"
    len_.__name__ = len_.__qualname__ = "len"
    for stand_in in (zip_, map_, enumerate_, len_):
        _STAND_INS[stand_in.__code__] = stand_in.__name__
    return zip_, map_, enumerate_, len_


#: The code of the tests' own zip, map, enumerate and len (``tests_pairing``) -> the builtin each
#: stands for, which a test passing one to the solution sends (``sort_by(xs, len)``: the sample's
#: own ``len``; a function of the harness's cannot be sent).
_STAND_INS: dict[Any, str] = {tests_filter.__code__: "filter"}


def _check_indexed(paths: Sequence[str] | None, frame: Any) -> None:
    """AssertionError where a value of the tests' that the loop over an empty ``enumerate`` (or
    ``range(len(r))``) indexes by its count (``zip_sites.indexed_sites``: ``expected`` in
    ``expected[i]``) has items: the loop pairs the answer with it by position, as zip does, and
    held for ``return []``. Only the tests' own names are read (their frame's), never a value of
    the sample's."""
    for path in paths or ():
        name, *indices = path.rstrip("]").split("[")
        first, *attrs = name.split(".")
        scopes = [scope for scope in (frame.f_locals, frame.f_globals) if first in scope]
        if first == "self" and not scopes:
            first, scopes = "cls", [scope for scope in (frame.f_locals,) if "cls" in scope]
        if not scopes:
            continue
        value = scopes[0][first]
        try:
            for attr in attrs:
                value = None if isinstance(value, Remote) else getattr(value, attr, None)
            for index in (i.rstrip("]") for i in indices):  # ``e[i]``: a row, by the loop's own index
                value = value[frame.f_locals[index]] if type(value) in (list, tuple, dict) else None
        except Exception:  # noqa: BLE001 - a property of the tests' that fails: their loop will say so
            continue
        if not isinstance(value, Remote) and _sized_length(value):
            raise AssertionError(f"the answer has no items and {path}, which the loop indexes by their count, has some")


#: Where a running call of the tests' zip or map is: its caller's code and instruction.
_Place = tuple[Any, int]


def _paired(name: str, operands: tuple[Any, ...], place: _Place,
            sites: Callable[[], dict[Site, tuple[int, ...]]]) -> tuple[Any, ...]:
    """``operands``, a sample's iterables read in full, unless an empty one sits beside one with
    items of another origin (``tests_pairing``): AssertionError then."""
    operands = tuple(list(o) if isinstance(o, Remote) else o for o in operands)
    _check_lengths(name, [_sized_length(o) for o in operands], place, sites)
    return operands


def _check_lengths(name: str, lengths: Sequence[int | None], place: _Place,
                   sites: Callable[[], dict[Site, tuple[int, ...]]]) -> None:
    """AssertionError where an operand known to have no items (length 0) sits beside one known to
    have some that does not share its origin (``zip_sites``); None is a length not known."""
    sized = [n for n in lengths if n is not None]
    if 0 not in sized or max(sized) == 0:
        return
    groups = _site_groups(name, place, sites)
    if groups is None or len(groups) != len(lengths):
        if max(sized) >= 2:
            raise AssertionError(f"{name}: one operand has no items and another has two or more")
        return
    for i, length in enumerate(lengths):
        if length == 0 and any(other and groups[j] != groups[i] for j, other in enumerate(lengths)):
            raise AssertionError(f"{name}: one operand has no items and another, not taken from it, has some")


class _Counted:
    """An operand of the tests' zip or map that is an iterator of unknown length, counting what it
    gives (``_Watched``)."""

    __slots__ = ("_items", "taken", "dry")

    def __init__(self, iterable: Any) -> None:
        self._items = iter(iterable)
        self.taken = 0
        self.dry = False

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._items)
        except StopIteration:
            self.dry = True
            raise
        self.taken += 1
        return item


class _Watched:
    """The tests' zip or map where some operand is an iterator of unknown length: Python's, except
    that when it ends before its first item because such an operand had none, that operand is
    empty for ``_check_lengths``. Why: ``zip((round(x, 2) for x in f(2)), expected)`` and
    ``zip(itertools.islice(f(2), 5), expected)`` held for ``return []``: a generator or an
    iterator the tests make was never measured (it may be endless; its end shows only here)."""

    __slots__ = ("_inner", "_check")

    def __init__(self, inner: Iterator[Any], check: Callable[[], None]) -> None:
        self._inner = inner
        self._check: Callable[[], None] | None = check

    def __iter__(self) -> _Watched:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._inner)
        except StopIteration:
            check, self._check = self._check, None
            if check is not None:
                check()
            raise
        self._check = None
        return item


def _watched(name: str, pair: Callable[..., Iterator[Any]], operands: tuple[Any, ...], kwargs: dict[str, Any],
             place: _Place, sites: Callable[[], dict[Site, tuple[int, ...]]]) -> Any:
    """``pair(*operands, **kwargs)``, watched (``_Watched``) when an operand's length is not known."""
    lengths = [_sized_length(o) for o in operands]
    if None not in lengths:
        return pair(*operands, **kwargs)
    counted = [o if n is not None else _Counted(o) for o, n in zip(operands, lengths)]

    def check() -> None:
        # one with items stays unmeasured, as in ``_paired``: ``zip(itertools.count(), f([]))`` is right
        _check_lengths(name, [0 if n is None and c.dry and not c.taken else n for n, c in zip(lengths, counted)],
                       place, sites)
    return _Watched(pair(*counted, **kwargs), check)


def _site_groups(name: str, place: _Place, sites: Callable[[], dict[Site, tuple[int, ...]]]) -> tuple[int, ...] | None:
    """The operand groups of the tests' call of ``name`` that ``place`` is making, or None where
    that place is not known (not the tests' code, no instruction positions before Python 3.11)."""
    position = _position(place)
    return None if position is None else sites().get((name, *position))


def _position(place: _Place) -> tuple[Any, ...] | None:
    """(filename, lineno, end_lineno, col_offset, end_col_offset) of the tests' instruction at
    ``place``, or None where it is not the tests' code or not known (before Python 3.11)."""
    code, lasti = place
    positions = getattr(code, "co_positions", None)
    if positions is None or code.co_filename not in _TESTS_FILES:
        return None
    position = next(itertools.islice(positions(), lasti // 2, None), None)
    return None if position is None or None in position else (code.co_filename, *position)


def tests_view(module: Any, builtins_view: Any = None) -> Any:
    """The module as the tests use it: numpy and numpy.testing as ``NumpyChecks``; with the run's
    ``builtins_view``, ``sys`` and ``importlib`` as ``ModuleWithViews`` whose ``sys.modules['builtins']``
    and ``importlib.import_module('builtins')`` are that view, as ``import builtins`` is (Python's
    zip held vacuously through them); others as they are."""
    name = getattr(module, "__name__", None)
    if name in ("numpy", "numpy.testing"):
        return NumpyChecks(module)
    if builtins_view is not None and module is sys:
        return ModuleWithViews(sys, {"modules": ModulesView({"builtins": builtins_view})})
    if builtins_view is not None and module is importlib:
        def import_module(name: str, package: str | None = None) -> Any:
            return builtins_view if name == "builtins" else importlib.import_module(name, package)
        return ModuleWithViews(importlib, {"import_module": import_module})
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
    return _Unavailable(name)


def symbol_tables(sources: Iterable[str]) -> Iterator[symtable.SymbolTable]:
    """Every symbol table (the module's, each function's and class's) of the sources that parse;
    a source that is not Python fails when run, binding and reading nothing."""
    for source in sources:
        try:
            tables = [symtable.symtable(source, "<tests>", "exec")]
        except Exception:  # noqa: BLE001 - not Python
            continue
        while tables:
            table = tables.pop()
            yield table
            tables.extend(table.get_children())


def bound_names(sources: Iterable[str]) -> frozenset[str]:
    """Every global name these sources bind anywhere: assignments, imports, ``def``/``class``,
    loop/``with``/``except`` targets, ``del``, a walrus in a comprehension, ``global`` in a
    function. Found statically, so a binding that fails or has not run yet still counts."""
    names: set[str] = set()
    for table in symbol_tables(sources):
        top = table.get_type() == "module"
        for sym in table.get_symbols():
            binds = sym.is_assigned() or sym.is_imported()
            if binds and (top or sym.is_declared_global()):
                names.add(sym.get_name())
    return frozenset(names)


def run_tests(session: Session, hello: dict[str, Any], steps: Sequence[tuple[str, bool]],
              setup: str) -> tuple[list[bool], bool]:
    """Run the steps here against the sample's names: one bool per test step, and whether the
    tests looked at the sample at all (a request to it, or a plain value of its that they name).
    Why the second: tests that never consult the sample pass every completion, an empty one too
    (a check shadowed by a builtin's name, ``try: add except NameError: ...``), so such a pass
    must not count."""
    sources = [setup, *(source for source, _ in steps)]
    paired = tests_pairing([("<setup>", setup), *(("<test>", source) for source, _ in steps)])
    real_builtins = dict(vars(builtins), zip=paired[0], map=paired[1], filter=tests_filter,
                         enumerate=paired[2], len=paired[3])  # a copy: the trainer's own stay
    builtins_view = BuiltinsView({name: real_builtins[name] for name in ("zip", "map", "filter", "enumerate")})
    layer: dict[str, Any] = dict(real_builtins)  # looked up after the tests' globals (module doc)
    namespace: dict[str, Any] = {"__name__": "tests", "__builtins__": layer}
    bound = bound_names(sources)
    modules = unbound_modules(sources, bound, builtins_view)
    modules.update(helper_objects(helper_names(steps, setup, bound | modules.keys(), global_names(sources))))
    namespace.update(modules)  # the tests' globals: never the sample's (module doc)
    theirs = bound | modules.keys()
    session.objects = object_roots(sources)
    session.varied = varied_query_roots(sources, DATA_QUERIES)
    sample: dict[str, Any] = {}
    solution = SolutionModule(session, sample)
    real_import = builtins.__import__

    def importer(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if name == SOLUTION_MODULE and level == 0:
            return solution
        if name == "builtins" and level == 0:
            return builtins_view
        return tests_view(real_import(name, globals, locals, fromlist, level), builtins_view)

    def sync(data: Any) -> None:
        names = session.names(data)
        sample.clear()
        sample.update(names)
        layer.clear()
        layer.update((name, value) for name, value in names.items() if name not in theirs)
        layer.update(real_builtins)
        layer["__import__"] = importer

    layer["__import__"] = importer
    if setup:  # before the solution's names exist, as in the sample
        try:
            exec(compile(setup, "<setup>", "exec", optimize=0), namespace)
        except Exception:  # noqa: BLE001 - setup that fails here still ran in the sample
            pass
    sync(hello.get("v"))
    passed: list[bool] = []
    not_implemented_is_no_truth()
    asks_before = session.asks
    previous = sys.gettrace()
    sys.settrace(_stop_at(session.channel))
    try:
        _run_steps(session, steps, namespace, sync, passed)
    finally:
        sys.settrace(previous)
    consulted = session.asks > asks_before or session.read_plain or bool(session.plain_names & _used_names(sources))
    return passed, consulted


def not_implemented_is_no_truth() -> None:
    """Make Python's warning for ``bool(NotImplemented)`` an error in this process, as it is from
    Python 3.14 on (a TypeError). Why: a comparison method called by hand answers NotImplemented
    for an operand of another type, and NotImplemented is truthy, so ``assert 'ab'.__eq__(f(x))``
    (``(3).__eq__``, ``[1].__eq__``, ``Point(1, 2).__eq__(p)``...) passed every completion that
    returned anything but a str. Added each run: a caller's ``catch_warnings`` may have dropped it."""
    warnings.filterwarnings("error", message=_NOT_IMPLEMENTED_TRUTH, category=DeprecationWarning)


def unbound_modules(sources: Iterable[str], bound: Collection[str], builtins_view: Any = None) -> dict[str, Any]:
    """The real modules for the ``TEST_MODULES`` names these sources use only as a module
    (``math.isclose``) and never bind; one that does not import here is ``NotInstalled``, never
    the solution's."""
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
    modules: dict[str, Any] = {}
    for name in sorted(as_module - otherwise - set(bound)):
        if name in TEST_MODULES:
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


def global_names(sources: Iterable[str]) -> set[str]:
    """Every global name these sources read, at the top or in a function or class body."""
    return {sym.get_name() for table in symbol_tables(sources) for sym in table.get_symbols()
            if sym.is_referenced() and sym.is_global()}


def _used_names(sources: Iterable[str]) -> set[str]:
    """Every name these sources mention (a plain value of the sample's may be read by any)."""
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return names


def _stop_at(channel: Channel) -> Callable[..., Any]:
    """A trace function that stops the tests' own Python lines (``<test>``/``<setup>`` code, their
    helper functions included) at the sample's deadline. Why: the tests run here, on values the
    sample chose, so ``for _ in range(f(x))`` ran for as long as the sample wanted, in the trainer,
    past every timeout. The channel is marked dead too, so a test catching the stop still ends the
    run of this sample. Not reachable from here: one C call on such a value (``sum(range(f(x)))``),
    which holds the interpreter until it returns: the process the tests run in is killed then
    (``Sandbox._talk_forked``; with ``tests_in = "trainer"`` it holds the trainer)."""
    def line(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and time.monotonic() > channel.deadline:
            channel.dead = SampleStopped("timeout", "the tests ran past timeout_s on the sample's values")
            raise channel.dead
        return line

    def call(frame: Any, event: str, arg: Any) -> Any:
        return line if frame.f_code.co_filename in _TESTS_FILES else None
    return call


def _run_steps(session: Session, steps: Sequence[tuple[str, bool]], namespace: dict[str, Any],
               sync: Callable[[Any], None], passed: list[bool]) -> None:
    """Run the steps in order, one verdict per test. A step that is not a test and raises is a
    failed check itself, and every test after it fails unrun, as a script run of the cell stops
    there; so does a failed test that leaves state a later step reads (``step_state``). Why:
    the failure was ignored, so a cell that collects results and asserts on them at the end
    (``assert all(results)`` of an empty list) passed a solution that only raised. A failed test
    that leaves nothing behind (an ``assert``, a loop of asserts, a test function) keeps the
    per-test partial credit: the tests after it still run."""
    stopped = False
    stateful = leaves_state([source for source, _ in steps])
    for (source, is_test), leaves in zip(steps, stateful):
        if stopped:
            if is_test:
                passed.append(False)
            continue
        ok = False
        if session.dirty:  # a call may have changed the sample's globals
            sync(session.ask_raw_names())
            session.dirty = False
        try:  # optimize=0: under ``python -O`` (or PYTHONOPTIMIZE) compile would drop every assert
            exec(compile(source, "<test>", "exec", optimize=0), namespace)
            ok = True
        except SampleStopped:
            raise
        except KeyboardInterrupt:
            raise
        except SystemExit as exc:  # the tests' ``sys.exit(0)`` ends a script run as a success
            ok = exc.code in (None, 0)
        except BaseException:  # noqa: BLE001 - any other failure of a test is a failed test
            ok = False
        if session.channel.dead is not None:  # the sample stopped, whatever the test's ``except`` did
            raise session.channel.dead
        if is_test or not ok:
            passed.append(ok)
        stopped = not ok and (leaves or not is_test)

