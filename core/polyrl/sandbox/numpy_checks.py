"""numpy and numpy.testing as the tests see them: checks that never hold vacuously on an empty answer.

Why a module of its own: the empty-array rules (``NumpyChecks``, ``NumpyFunction``,
``EmptyArray``) are one guard against ``return []`` forgeries of numpy tests, self-contained
beside the tests' ``zip``/``map`` guard (``pairing``); numpy is only ever read from
``sys.modules``, never imported here.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterable
from typing import Any

from polyrl.sandbox.module_views import ModuleView
from polyrl.sandbox.remote import Remote

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
        places = _operand_places(self._function, len(args), kwargs) if self._fails is not None else []
        if len(places) == 2:
            args, kwargs = _read_once(places, args, kwargs)
            if one_empty([args[key] if kind == "arg" else kwargs[key] for kind, key in places]):
                if self._fails == "false":
                    return False
                raise AssertionError(f"{getattr(self._function, '__name__', 'numpy')}: one operand has no elements "
                                     "and the other has some")
        return empty_array(self._function(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)

    def __repr__(self) -> str:
        return repr(self._function)


def _operand_places(function: Callable[..., Any], count: int, kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """Where a check's two operands were given: ``("arg", i)`` or ``("kw", name)``, by the names of
    its first two parameters (``np.testing.assert_allclose(actual=r, desired=3.14)``,
    ``np.allclose(r, b=3.14)``); fewer than two when one is missing. Why the names:
    ``np.testing.assert_allclose(actual=[], desired=3.14)`` holds, and keyword operands were never
    measured, so ``return []`` passed it."""
    try:
        names = _first_parameters(function)
    except TypeError:  # unhashable: no names known
        names = ()
    places: list[tuple[str, Any]] = []
    for i in range(2):
        if i < count:
            places.append(("arg", i))
        elif i < len(names) and names[i] in kwargs:
            places.append(("kw", names[i]))
    return places


@functools.lru_cache(maxsize=256)
def _first_parameters(function: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``function``'s first two parameters that a keyword can give (none of a ufunc's,
    which are positional only), or () where it has no signature."""
    try:
        parameters = list(inspect.signature(function).parameters.values())[:2]
    except (TypeError, ValueError):
        return ()
    return tuple(p.name if p.kind is not inspect.Parameter.POSITIONAL_ONLY else "" for p in parameters)


def _read_once(places: list[tuple[str, Any]], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with each operand that is a value of the sample's read into a numpy
    array once, for the emptiness check and the check itself alike. Why: each read is a request
    to the sample, which may answer the second otherwise: an object giving ``[9.0]`` to the first
    read and nothing after passed ``np.allclose(area(1), 3.14159)`` (the check saw an element,
    numpy's own comparison an empty array); one that numpy cannot read (ragged) fails the check
    there, since a second read could answer otherwise. A function of the sample's
    (``assert_raises(E, f)``) stays as it is."""
    numpy = sys.modules["numpy"]
    listed = list(args)
    for kind, key in places:
        value = listed[key] if kind == "arg" else kwargs[key]
        if not isinstance(value, Remote) or value._kind == "callable":
            continue
        value = numpy.asarray(value)  # what it raises (a ragged answer) numpy's own read raises too
        if kind == "arg":
            listed[key] = value
        else:
            kwargs = {**kwargs, key: value}
    return tuple(listed), kwargs


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
