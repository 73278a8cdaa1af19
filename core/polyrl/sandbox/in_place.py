"""What a call of the solution's did to the tests' arguments, as in Python.

Why a module of its own: the sample works on its own copies of the tests' arguments (they cross as
plain data), so a right in-place function (``sort_it(xs)``, LeetCode's ``merge(nums1, m, nums2,
n)`` or ``rotate(matrix)``, ``tally(counts, word)``) left the tests' value as it was and failed
``assert xs == [1, 2, 3]``. The sample now sends its copies of the list, dict and set arguments
back after a call returning None (``server._Session.handle``: an ``["I", args, kwargs]`` answer),
and those it changed after a call returning a value, with the value (``["I", args, kwargs,
value]``: LeetCode 26's ``k = removeDuplicates(nums)`` then ``nums[:k] == [1, 2]`` scored 0), and
the tests' values take their contents, in place. Only where nothing shrinks, at every level the tests'
value has a container: a list keeps at least its length, a dict its keys, a set its size. Why: a
function that empties or shortens its argument would make the tests' later loops over it vacuous
(``all(a <= b for a, b in zip(xs, xs[1:]))`` of an emptied ``xs``), so such a change stays unseen
by the tests, as every change was before (a right function removing items in place still fails).
"""

from __future__ import annotations

from typing import Any

from polyrl.sandbox.values import ProtocolError, decode

#: The tag of a call's answer that returned None with its arguments' new contents.
WRITTEN = "I"
#: The argument types whose contents come back (``server._Session.handle`` sends these).
_CONTAINERS = (list, dict, set)


def written(answer: Any) -> bool:
    """Whether ``answer`` (a call's ``v``) carries its arguments' contents (and the call's value,
    a fourth item, unless it returned None)."""
    return isinstance(answer, list) and len(answer) in (3, 4) and answer[0] == WRITTEN


def write_back(answer: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Give the tests' list, dict and set arguments the contents the sample's copies have after
    the call, where nothing shrinks (module doc); ``ProtocolError`` for a malformed answer."""
    after, after_kw = answer[1], answer[2]
    if not (isinstance(after, list) and len(after) == len(args) and isinstance(after_kw, dict)
            and set(after_kw) <= set(kwargs)):
        raise ProtocolError("a malformed in-place answer")
    pairs = [*zip(args, after), *((kwargs[k], v) for k, v in after_kw.items())]
    news = [(old, decode(new)) for old, new in pairs if new is not None]
    for old, new in news:
        if type(old) in _CONTAINERS and _fits(old, new):
            _assign(old, new)


def _fits(old: Any, new: Any) -> bool:
    """Whether ``new`` holds at least what ``old`` counts, at every level where ``old`` is a container."""
    if type(old) not in _CONTAINERS:
        return True
    if type(new) is not type(old) or len(new) < len(old):
        return False
    if type(old) is list:
        return all(_fits(o, n) for o, n in zip(old, new))
    if type(old) is dict:
        return old.keys() <= new.keys() and all(_fits(old[k], new[k]) for k in old)
    return True


def _assign(old: Any, new: Any) -> None:
    """``old`` takes ``new``'s contents, its own inner containers kept (a row the tests hold sees the change)."""
    if type(old) is set:
        old.clear()
        old.update(new)
        return
    keys = range(len(old)) if type(old) is list else old.keys() & new.keys()
    for key in keys:
        if type(old[key]) in _CONTAINERS and type(new[key]) is type(old[key]):
            _assign(old[key], new[key])
        else:
            old[key] = new[key]
    if type(old) is list:
        old.extend(new[len(old):])
    else:
        old.update({k: v for k, v in new.items() if k not in old})
