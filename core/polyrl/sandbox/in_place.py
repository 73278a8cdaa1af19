"""What a call of the solution's did to the tests' arguments, as in Python.

Why a module of its own: the sample works on its own copies of the tests' arguments (they cross as
plain data), so a right in-place function (``sort_it(xs)``, LeetCode's ``merge(nums1, m, nums2,
n)`` or ``rotate(matrix)``, ``tally(counts, word)``) left the tests' value as it was and failed
``assert xs == [1, 2, 3]``. The sample now sends its copies of the list, dict and set arguments
back after a call returning None (``server._Session.handle``: an ``["I", args, kwargs]`` answer),
and those it changed after a call returning a value, with the value (``["I", args, kwargs,
value]``: LeetCode 26's ``k = removeDuplicates(nums)`` then ``nums[:k] == [1, 2]`` scored 0), and
the tests' values take their contents, in place (a ``defaultdict``, ``Counter`` or ``OrderedDict``
argument too, as a dict: ``_DICTS``). Where something shrinks (at some level the tests'
value has a container, a list lost items, a dict keys, a set its size), only where no value a
check of the tests' may read vacuously holds it (``vacuous_reads``: ``may_shrink``). Why: a function
that empties or shortens its argument would make the tests' later loops and properties over it
vacuous (``all(a <= b for a, b in zip(xs, xs[1:]))``, ``xs == sorted(xs)`` of an emptied ``xs``),
so such a change stays unseen there, as every change was before; where the tests only compare it
with values of their own, Python's result stands (``del nums[k:]`` then ``assert nums[:k] == [1, 2]``).
An argument the tests compare, through a function of theirs, with an answer of the solution's
takes no change at all (``may_change``; ``vacuous_reads.compared_with_answer``): ``xs[:] = [0] *
len(xs); return list(xs)`` made the tests' ``sorted(xs)`` equal its answer, same length or not.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from polyrl.sandbox.values import ProtocolError, decode

#: The tag of a call's answer that returned None with its arguments' new contents.
WRITTEN = "I"
#: The argument types whose contents come back (``server._Session.handle`` sends these).
_CONTAINERS = (list, dict, set)
#: Standard dict types a test may pass, whose contents come back as a dict (a defaultdict crosses
#: as one; the sample rebuilds a Counter or OrderedDict and sends it back as one). Why: they were
#: never written back, so a right ``bump(d, 'a')`` on the tests' ``defaultdict(int)`` scored 0.25.
_DICTS = (dict, collections.Counter, collections.OrderedDict, collections.defaultdict)


def _base(value: Any) -> type | None:
    """The built-in container type whose contents ``value`` takes (``_CONTAINERS``), or None."""
    kind = type(value)
    return dict if kind in _DICTS else kind if kind in _CONTAINERS else None


def written(answer: Any) -> bool:
    """Whether ``answer`` (a call's ``v``) carries its arguments' contents (and the call's value,
    a fourth item, unless it returned None)."""
    return isinstance(answer, list) and len(answer) in (3, 4) and answer[0] == WRITTEN


def write_back(answer: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               may_shrink: Callable[[Any], bool] | None = None,
               may_change: Callable[[Any], bool] | None = None) -> None:
    """Give the tests' list, dict and set arguments the contents the sample's copies have after
    the call, where nothing shrinks or ``may_shrink`` of the argument says yes, and never where
    ``may_change`` of it says no (module doc); ``ProtocolError`` for a malformed answer."""
    after, after_kw = answer[1], answer[2]
    if not (isinstance(after, list) and len(after) == len(args) and isinstance(after_kw, dict)
            and set(after_kw) <= set(kwargs)):
        raise ProtocolError("a malformed in-place answer")
    pairs = [*zip(args, after), *((kwargs[k], v) for k, v in after_kw.items())]
    news = [(old, decode(new)) for old, new in pairs if new is not None]
    for old, new in news:
        if _base(old) is None or (may_change is not None and not may_change(old)):
            continue
        if _fits(old, new):
            _assign(old, new)
        elif _base(new) is _base(old) and may_shrink is not None and may_shrink(old):
            _assign(old, new, shrink=True)


def _fits(old: Any, new: Any) -> bool:
    """Whether ``new`` holds at least what ``old`` counts, at every level where ``old`` is a container."""
    if _base(old) is None:
        return True
    if _base(new) is not _base(old) or len(new) < len(old):
        return False
    if type(old) is list:
        return all(_fits(o, n) for o, n in zip(old, new))
    if _base(old) is dict:
        return old.keys() <= new.keys() and all(_fits(old[k], new[k]) for k in old)
    return True


def _assign(old: Any, new: Any, shrink: bool = False) -> None:
    """``old`` takes ``new``'s contents, its own inner containers kept (a row the tests hold sees
    the change); ``shrink``: what ``new`` lacks goes too (else ``_fits`` said nothing does)."""
    if type(old) is set:
        old.clear()
        old.update(new)
        return
    if shrink and type(old) is list:
        del old[len(new):]
    elif shrink:
        for key in old.keys() - new.keys():
            del old[key]
    keys = range(len(old)) if type(old) is list else old.keys() & new.keys()
    for key in keys:
        if _base(old[key]) is not None and _base(new[key]) is _base(old[key]):
            _assign(old[key], new[key], shrink)
        else:
            old[key] = new[key]
    if type(old) is list:
        old.extend(new[len(old):])
    else:  # one key at a time: a Counter's update adds counts, and dict.update skips an OrderedDict's order
        for key, value in [(k, v) for k, v in new.items() if k not in old]:
            old[key] = value
