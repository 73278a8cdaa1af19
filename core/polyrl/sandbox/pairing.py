"""The tests' ``zip``, ``map``, ``filter``, ``enumerate`` and ``len``: no vacuous truth on an empty answer.

Why a module of its own: ``all(a == b for a, b in zip(f(2), expected))`` holds for ``return []``,
so the tests get stand-ins of these builtins that fail an empty operand beside one with items of
another origin (``tests_pairing``; where operands come from is ``zip_sites``'), an answer shorter
than the value the tests wrote for it (``_check_prefix``; which operand is which is
``prefix_sites``'), and a loop that indexes the tests' values by an empty answer's count
(``_check_indexed``). Self-contained: it
asks only whether a value is the sample's (``Remote``).
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import sys
from collections.abc import Callable, Iterator, Sequence, Sized
from typing import Any

from polyrl.sandbox.prefix_sites import ANSWER, EXPECTED, operand_roles
from polyrl.sandbox.reader import Reader
from polyrl.sandbox.remote import Remote, tests_next
from polyrl.sandbox.shrinking import loops_over, passes_items_on
from polyrl.sandbox.truth_loops import tests_all, tests_any, tests_sum
from polyrl.sandbox.tests_guard import TESTS_FILES
from polyrl.sandbox.zip_sites import Site, indexed_sites, operand_groups

#: The sized operands the tests' ``zip`` and ``map`` measure (a sample's iterable is read in full
#: first, as Python's own ``zip`` would); other iterators go through untouched, except one whose
#: count is known (``_iterator_length``). A dict's views and a deque besides: ``zip(f(2), expected.values())``
#: held for ``return []``.
_SIZED_TYPES: tuple[type[Sized], ...] = (list, tuple, str, bytes, range, dict, set, frozenset, type({}.keys()),
                                         type({}.values()), type({}.items()), collections.deque)


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


#: The tests' ``map``/``filter``/``enumerate`` objects' classes, each deriving from Python's (``sample_types``:
#: ``type()`` of one is the tests' stand-in of that name, as ``type(map(f, r)) is map`` holds in Python).
PAIRING_CLASSES = (_Mapped, _Filtered, _Enumerated)


def _enumerated(source: Iterator[Any], start: int) -> Any:
    """``enumerate`` as the tests see it (``tests_pairing``): Python's, whose operand ``_paired``
    can see is empty (``zip(enumerate(f(2)), enumerate(expected))``)."""
    numbered = _Enumerated(source, start)
    numbered._source = source
    return numbered


@loops_over
def tests_filter(function: Any, iterable: Any) -> Any:
    """``filter`` as the tests see it: Python's, whose operand ``_paired`` can see is empty."""
    source = iter(iterable)
    filtered = _Filtered(function, source)
    filtered._source = source
    return filtered


def _empty_iterator(value: Any) -> bool:
    """Whether ``value`` is an iterator known, without taking an item, to have none left
    (``_iterator_length``). Why: ``zip(iter(f(2)), [1.0, 2.0])`` and ``zip(map(float, f(2)),
    expected)`` held for ``return []``."""
    return _iterator_length(value) == 0


def _iterator_length(value: Any) -> int | None:
    """How many items an iterator is known, without taking one, to have left: a built-in
    container's (``iter(r)``, ``reversed(r)``: its exact count) or the tests' ``map``/``enumerate``
    over one (as many; ``filter``: none when its operand has none, else not known); None for any
    other iterator (it may be endless, and only its end shows what it had: ``_watched``). Why the
    count of one with items: ``zip(f(2), iter(expected))`` held for ``return []`` where
    ``zip(f(2), expected)`` failed; an iterator over a list the tests hold has that list's items."""
    if type(value) in (_Mapped, _Enumerated):
        return _iterator_length(value._source)
    if type(value) is _Filtered:
        return 0 if _iterator_length(value._source) == 0 else None
    if type(value) is Reader:  # over a sample's value: none when one read ahead finds none
        return 0 if value.empty() else None
    return operator.length_hint(value) if type(value) in _EXACT_ITERATORS else None


def _sized_length(value: Any) -> int | None:
    """The number of items ``zip`` takes from ``value``, or None when it is not a sized operand
    nor an iterator whose count is known (``_iterator_length``)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return len(value) if value.ndim else None
    if isinstance(value, _SIZED_TYPES):
        return len(value)
    return _iterator_length(value)


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
    left, and one over the tests' values as having the items it has left (``_iterator_length``), any other iterator when zip or map ends before its first item
    because it had none (``_watched``); ``import builtins`` gives these too (``BuiltinsView``).
    The third and fourth are their ``enumerate`` and ``len``: over an empty answer (``for i in
    range(len(r))``) they fail where the loop indexes a value of the tests' with items by its count
    (``_check_indexed``)."""
    sites = functools.cache(lambda: operand_groups(sources))
    roles = functools.cache(lambda: operand_roles(sources))
    found = _Sites(sites, roles)

    @passes_items_on  # ``for _ in zip(c.keys(), c.values()): n += 1`` reads its operands whole (``_read``)
    def zip_(*iterables: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        place = (frame.f_code, frame.f_lasti)
        return _watched("zip", zip, _paired("zip", iterables, place, found), kwargs, place, found)

    @loops_over
    def map_(function: Any, *iterables: Any, **kwargs: Any) -> Any:
        if len(iterables) >= 2:
            frame = sys._getframe(1)
            place = (frame.f_code, frame.f_lasti)
            paired = _paired("map", iterables, place, found)
            return _watched("map", functools.partial(map, function), paired, kwargs, place, found)
        if len(iterables) != 1 or kwargs:
            return map(function, *iterables, **kwargs)
        source = iter(iterables[0])
        mapped = _Mapped(function, source)
        mapped._source = source
        return mapped

    indexed = functools.cache(lambda: indexed_sites(sources))

    @passes_items_on
    @loops_over
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
        STAND_INS[stand_in.__code__] = stand_in.__name__
    return zip_, map_, enumerate_, len_


#: The code of the tests' own zip, map, enumerate and len (``tests_pairing``) -> the builtin each
#: stands for, which a test passing one to the solution sends (``sort_by(xs, len)``: the sample's
#: own ``len``; a function of the harness's cannot be sent).
STAND_INS: dict[Any, str] = {tests_filter.__code__: "filter", tests_next.__code__: "next",
                             tests_all.__code__: "all", tests_any.__code__: "any", tests_sum.__code__: "sum"}


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


class _Sites:
    """The static facts of the tests' zip and map calls, each found the first time it matters:
    their operands' groups (``zip_sites.operand_groups``) and roles (``prefix_sites.operand_roles``)."""

    __slots__ = ("groups", "roles")

    def __init__(self, groups: Callable[[], dict[Site, tuple[int, ...]]],
                 roles: Callable[[], dict[Site, tuple[str, ...]]]) -> None:
        self.groups = groups
        self.roles = roles


def _paired(name: str, operands: tuple[Any, ...], place: _Place, sites: _Sites) -> tuple[Any, ...]:
    """``operands``, a sample's iterables read in full, unless an empty one sits beside one with
    items of another origin (``tests_pairing``), or the answer is shorter than the value the tests
    wrote for it (``_check_prefix``): AssertionError then. A sample's value that is its
    own iterator (a generator) is read as zip takes its items (``reader``), as Python's zip does:
    it may be endless (``zip(range(3), fib())``); ``_watched`` sees whether it had none."""
    operands = tuple(_read(o) if isinstance(o, Remote) else o for o in operands)
    lengths = [_sized_length(o) for o in operands]
    _check_lengths(name, lengths, place, sites.groups)
    _check_prefix(name, _counted_lengths(operands, lengths), place, sites)
    return operands


def _counted_lengths(operands: Sequence[Any], lengths: Sequence[int | None]) -> list[int | None]:
    """``lengths`` with a ``range``'s left out (None): a counter beside the answer
    (``zip(range(100), f(x))``), never a value the tests wrote for it."""
    return [None if type(o) is range else n for o, n in zip(operands, lengths)]


def _check_prefix(name: str, lengths: Sequence[int | None], place: _Place, sites: _Sites) -> None:
    """AssertionError where an operand that is the solution's answer has fewer items than one
    beside it, of another origin, that the tests wrote for it (``prefix_sites``); None is a
    length not known. Why: zip stops at the shorter, so ``all(a == b for a, b in zip(f(3), [1, 2,
    3]))`` held for ``return [1, 2]`` (an off-by-one dropping the last item), as ``strict=True``
    would not. A longer answer is left as Python's zip leaves it (the tests may check a prefix of
    it), and so is every place not known."""
    if sum(n is not None for n in lengths) < 2:
        return
    position = _position(place)
    if position is None:
        return
    roles = sites.roles().get((name, *position))
    groups = sites.groups().get((name, *position))
    if roles is None or len(roles) != len(lengths) or (groups is not None and len(groups) != len(lengths)):
        return
    for i, short in enumerate(lengths):
        if roles[i] != ANSWER or short is None:
            continue
        for j, long in enumerate(lengths):
            if roles[j] == EXPECTED and long is not None and long > short and (groups is None or groups[i] != groups[j]):
                raise AssertionError(f"{name}: the answer has {short} items and the expected value beside it "
                                     f"{long}: {name} would pair only its first {short}")


@loops_over
def _read(value: Remote) -> Any:
    """A sample's operand of zip or map: its items as a list, or its own iterator's reader. A
    loop over it (``shrinking.loops_over``): the pairs are checked one by one, so a value emptied
    beside another emptied one (``zip(d.keys(), d.values())`` after ``show(d)``) held vacuously."""
    items = iter(value)
    return items if isinstance(items, Reader) and items.own else list(items)


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
    that when it ends because such an operand ran out, that operand has the items it gave: none
    for ``_check_lengths``, fewer than an expected value's for ``_check_prefix``. Why:
    ``zip((round(x, 2) for x in f(2)), expected)`` and ``zip(itertools.islice(f(2), 5), expected)``
    held for ``return []``, and a generator yielding a correct prefix held too: a generator or an
    iterator the tests make was never measured (it may be endless; its end shows only here)."""

    __slots__ = ("_inner", "_check")

    def __init__(self, inner: Iterator[Any], check: Callable[[], None]) -> None:
        self._inner = inner
        self._check: Callable[[], None] | None = check

    @property  # type: ignore[misc]
    def __class__(self) -> Any:
        """Python's ``isinstance`` reads it after ``type()``: the zip or map object it watches."""
        return type(self._inner)

    def __iter__(self) -> _Watched:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._inner)
        except StopIteration:
            check, self._check = self._check, None
            if check is not None:
                check()
            raise


def _watched(name: str, pair: Callable[..., Iterator[Any]], operands: tuple[Any, ...], kwargs: dict[str, Any],
             place: _Place, sites: _Sites) -> Any:
    """``pair(*operands, **kwargs)``, watched (``_Watched``) when an operand's length is not known."""
    lengths = [_sized_length(o) for o in operands]
    if None not in lengths:
        return pair(*operands, **kwargs)
    counted = [o if n is not None else _Counted(o) for o, n in zip(operands, lengths)]

    def check() -> None:
        # one with items stays unmeasured, as in ``_paired``: ``zip(itertools.count(), f([]))`` is right
        _check_lengths(name, [0 if n is None and c.dry and not c.taken else n for n, c in zip(lengths, counted)],
                       place, sites.groups)
        _check_prefix(name, _counted_lengths(operands, [c.taken if n is None and c.dry else n
                                                        for n, c in zip(lengths, counted)]), place, sites)
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
    if positions is None or code.co_filename not in TESTS_FILES:
        return None
    position = next(itertools.islice(positions(), lasti // 2, None), None)
    return None if position is None or None in position else (code.co_filename, *position)
