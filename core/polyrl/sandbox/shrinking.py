"""How many items a sample's value may lose to the calls made since its last whole reading.

Why a module of its own: ``remote.Remote`` compares a value's readings (``_snapshot``), and two
rules here decide when a reading with fewer items is the sample emptying a value under a check of
the tests' rather than a call changing it as Python would:

- a call of a method of its own (or of an object made with it) for its value may take the items
  it gave back (``taken_back``): a right ``assert q.drain() == [3, 2, 1]`` took three in one call,
  and a loop over ``q`` after it scored 0 (one item per call was all it might take);
- a loop of the tests' (``looped_here``: ``for x in r``, a comprehension, ``all(... for x in r)``)
  over a value emptied since its last whole reading, by calls fewer than the items it had, fails
  its test unless the tests read it whole and empty, before or after (``Remote._emptied_unseen``):
  a forged ``primes`` giving 4, 4, 4 to ``len`` and nothing once passed to a function of the
  sample's (``show(r)``) or once the tests called one of its methods as a statement
  (``r.reset()``) passed ``len(r) == 3`` and the loop ``all(is_prime(x) for x in r)`` (1.0). A
  right value the tests empty they expect empty and check so (``len(q) == 0``, ``list(q) == []``,
  ``not q``), before or after such a loop; the rule leaves alone a value that keeps an item
  (``g.remove(2)`` then a loop over the edges left) or lost no more items than calls were made
  (``s.pop()`` of a one-item stack).
"""

from __future__ import annotations

import collections
import dis
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from polyrl.sandbox.tests_guard import TESTS_FILES
from polyrl.sandbox.values import encode

#: The instruction a loop or a comprehension asks its iterable's ``__iter__`` from.
_LOOP_OPS = frozenset({dis.opmap["GET_ITER"]})
#: Types whose items a call returned stand for the items it took (a dict: its keys, as iterating it gives).
_CONTAINERS = (list, tuple, set, frozenset, dict)
#: The code of the tests' stand-ins that take an iterator of their operand to loop over it
#: (``pairing``: ``enumerate``, ``map`` of one iterable, ``filter``), registered by ``loops_over``.
_LOOPING: set[types.CodeType] = set()


def loops_over(function: Callable[..., Any]) -> Callable[..., Any]:
    """Register ``function``, a stand-in of the tests' builtins, as a loop over its operand for
    ``looped_here`` (``for i, x in enumerate(r)``, ``all(map(is_prime, r))``); ``function`` itself."""
    _LOOPING.add(function.__code__)
    return function


def looped_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__iter__`` asking) is the tests'
    own code at a loop's or a comprehension's start, or a stand-in of theirs ``loops_over``
    registered: a check over each item, which an empty value holds vacuously. ``list(r)``,
    ``sorted(r)``, ``x in r`` and the tests' ``zip`` read it whole or otherwise, and are no such
    loop here."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    code = frame.f_code
    if code in _LOOPING:
        return True
    if code.co_filename not in TESTS_FILES or not 0 <= frame.f_lasti < len(code.co_code):
        return False
    return code.co_code[frame.f_lasti] in _LOOP_OPS


def returned_items(value: Any) -> list[Any]:
    """The items a call's answer stands for: a container's items (a dict's keys), else itself."""
    return list(value) if type(value) in _CONTAINERS else [value]


def taken_back(before: list[Any], after: list[Any], returned: Iterable[Any], calls: int) -> int:
    """How many of the items lost from ``before`` to ``after`` the calls between may have taken:
    one per call, or as many of the lost items as they returned (``pop``, ``drain``), if more."""
    lost = _keys(before) - _keys(after)
    return max(calls, sum((_keys(returned) & lost).values()))


def _keys(items: Iterable[Any]) -> collections.Counter[str]:
    """``items`` as a multiset of keys that two readings share for the same item (``reader.same_items``:
    plain data exactly, an object of the sample's by its type's name)."""
    counts: collections.Counter[str] = collections.Counter()
    for item in items:
        if getattr(type(item), "LIVES_IN_SAMPLE", False):
            counts["object " + str(item._type)] += 1
            continue
        encoded = encode(item)
        counts[repr(encoded) if encoded is not None else "type " + type(item).__name__] += 1
    return counts
