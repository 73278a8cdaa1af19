"""Standard values (``Counter``, ``deque``, ``Fraction``, ``range``, a namedtuple) crossing as plain data.

Why a module of its own: a test passes them to the sample and the sample returns them, and each
side rebuilds its own copy from data of one fixed shape; which types, and how each is checked on
the way back (``rebuilt``, ``named_tuple``), is independent of how the tests are run.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import functools
import importlib
from collections.abc import Callable
from typing import Any

from polyrl.sandbox.values import ProtocolError, spread

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
    collections.UserDict: ("collections", "UserDict", dict),
    collections.UserList: ("collections", "UserList", list),
    collections.UserString: ("collections", "UserString", str),
    bytearray: ("builtins", "bytearray", bytes),
}
#: Built-in types a test may pass that the sample makes from positional arguments: type ->
#: (module, name, the arguments). Why: ``total(range(5))`` and ``f(x)[:2]`` (a slice, on a numpy
#: array the solution returned) could not be sent, so right solutions failed them.
CONSTRUCTED: dict[type, tuple[str, str, Callable[[Any], list[Any]]]] = {
    range: ("builtins", "range", lambda r: [r.start, r.stop, r.step]),
    slice: ("builtins", "slice", lambda s: [s.start, s.stop, s.step]),
    datetime.date: ("datetime", "date", lambda d: [d.year, d.month, d.day]),
    datetime.datetime: ("datetime", "datetime", lambda d: [d.year, d.month, d.day, d.hour, d.minute, d.second,
                                                           d.microsecond, *([d.tzinfo] if d.tzinfo else [])]),
    datetime.time: ("datetime", "time", lambda t: [t.hour, t.minute, t.second, t.microsecond,
                                                   *([t.tzinfo] if t.tzinfo else [])]),
    datetime.timedelta: ("datetime", "timedelta", lambda t: [t.days, t.seconds, t.microseconds]),
    datetime.timezone: ("datetime", "timezone", lambda z: [z.utcoffset(None), z.tzname(None)]),  # a fixed offset
}
#: Standard values the sample returns as a tuple of ints, its constructor's positional arguments
#: (``server._STANDARD``): (module, name) -> (the constructor, how many ints it takes). Why: a right
#: ``parse_date(s)`` returning ``datetime.date(2020, 1, 2)``, ``r(3)`` returning ``range(3)`` or
#: a ``timedelta`` stayed in the sample, equal to nothing, and failed ``== date(2020, 1, 2)``. Sound
#: as the others: the value here is the trainer's own, built from ints (an aware datetime or time,
#: whose zone is an object, stays a handle).
POSITIONAL: dict[tuple[str, str], tuple[Callable[..., Any], tuple[int, ...]]] = {
    ("datetime", "date"): (datetime.date, (3,)),
    ("datetime", "datetime"): (datetime.datetime, (7,)),
    ("datetime", "time"): (datetime.time, (4,)),
    ("datetime", "timedelta"): (datetime.timedelta, (3,)),
    ("builtins", "range"): (range, (3,)),
}
#: The same standard types coming back from the sample: (module, name) -> the constructor that
#: rebuilds one here from exact plain data (a defaultdict comes as a dict). Why: a Counter, deque,
#: Fraction the solution returned stayed in the sample, comparing equal to nothing, so a right
#: ``count(s)`` returning ``Counter(s)`` failed ``assert count(s) == Counter(s)``. Sound: the
#: value here is the trainer's own type, built from data (no method of the sample's answers).
REBUILDERS: dict[tuple[str, str], Callable[..., Any]] = {
    (module, name): getattr(importlib.import_module(module), name) for module, name, _ in REBUILT.values()} | {
    where: made for where, (made, _) in POSITIONAL.items()}


def rebuilt(module: str, name: str, plain: Any) -> Any:
    """The standard value (``REBUILDERS``) a sample sent as plain data, from data of the one shape
    its constructor is sent (``server._STANDARD``), else ``ProtocolError``. Why the shape: an
    ``OrderedDict`` (or dict) built from a list of pairs hashes keys no ``spread`` has seen, and
    30k colliding keys held the trainer for seconds, as a set of them did (``values.MAX_SAME_HASH``)."""
    positional = POSITIONAL.get((module, name))
    if positional is not None:  # ints, as many as its constructor takes here
        if not (type(plain) is tuple and len(plain) in positional[1] and all(type(p) is int for p in plain)):
            raise ProtocolError(f"a {name} sent as {type(plain).__name__}")
        try:
            return positional[0](*plain)
        except (ValueError, OverflowError) as exc:
            raise ProtocolError(f"a {name} out of range") from exc
    if name in ("Fraction", "Decimal", "UserString"):
        ok = type(plain) is str
    elif name == "bytearray":
        ok = type(plain) is bytes
    elif name == "OrderedDict":
        ok = type(plain) is list and all(type(p) is tuple and len(p) == 2 for p in plain)
        if ok:
            spread([key for key, _ in plain])
    else:
        ok = type(plain) is (list if name in ("deque", "UserList") else dict)
    if not ok:
        raise ProtocolError(f"a {name} sent as {type(plain).__name__}")
    return REBUILDERS[module, name](plain)


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


#: numpy dtype kinds whose arrays and scalars cross to the sample as plain data (bool, ints,
#: floats, complex, str): their ``tolist()`` is Python's own numbers and strs.
_NUMPY_KINDS = frozenset("biufcU")


def numpy_constructed(value: Any) -> tuple[str, str, list[Any]] | None:
    """A numpy array or scalar of the tests' as the sample's numpy makes it (module, name,
    positional arguments: its items as lists and its dtype), or None for anything else. Why: a
    test passing one (``double(np.array([1, 2]))``) raised "a ndarray cannot be sent", so a right
    numpy solution scored 0. Sound: the value is the tests' own data going in, as a list is. An
    empty array of more than one dimension (its shape is not in its items) stays unsendable."""
    kind = type(value)
    if kind.__module__ != "numpy":
        return None
    dtype: Any = getattr(value, "dtype", None)
    if getattr(dtype, "kind", None) not in _NUMPY_KINDS:
        return None
    if kind.__name__ == "ndarray":
        if value.size == 0 and value.ndim > 1:
            return None
        return "numpy", "array", [value.tolist(), dtype.str]
    if getattr(value, "ndim", None) == 0 and kind.__name__.isidentifier():  # np.float64(2.5), np.int32(3)
        return "numpy", kind.__name__, [value.item()]
    return None
