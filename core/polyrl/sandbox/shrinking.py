"""How many items a sample's value may lose to the calls made since its last whole reading.

Why a module of its own: ``remote.Remote`` compares a value's readings (``_snapshot``), and two
rules here decide when a reading with fewer items is the sample emptying a value under a check of
the tests' rather than a call changing it as Python would:

- a call of a method of its own (or of an object made with it) for its value may take the items
  it gave back (``taken_back``): a right ``assert q.drain() == [3, 2, 1]`` took three in one call,
  and a loop over ``q`` after it scored 0 (one item per call was all it might take);
- a loop of the tests' (``looped_here``: ``for x in r``, a comprehension, ``all(... for x in r)``,
  ``for x in sorted(r)``) over a value emptied since its last whole reading, by calls fewer than
  the items it had, or left by them items it never had and was not handed (``gained``), fails
  its test unless the tests read it whole and empty, before or after (``Remote._emptied_unseen``):
  a forged ``primes`` giving 4, 4, 4 to ``len`` and nothing once passed to a function of the
  sample's (``show(r)``) or once the tests called one of its methods as a statement
  (``r.reset()``) passed ``len(r) == 3`` and the loop ``all(is_prime(x) for x in r)`` (1.0). A
  right value the tests empty they expect empty and check so (``len(q) == 0``, ``list(q) == []``,
  ``not q``), before or after such a loop; the rule leaves alone a value that keeps an item
  (``g.remove(2)`` then a loop over the edges left) or lost no more items than calls handed
  something of the tests' were made, or than the calls returned (``s.pop()`` of a one-item stack;
  ``Session.changes``).
"""

from __future__ import annotations

import collections
import dis
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

from polyrl.sandbox.compared_copies import compared_copy_at
from polyrl.sandbox.item_free_loops import checks_no_item
from polyrl.sandbox.module_views import BOUND_CODE
from polyrl.sandbox.tests_bytecode import MAX_CODES, plain_instructions
from polyrl.sandbox.tests_guard import TESTS_FILES
from polyrl.sandbox.values import item_key

#: The instruction a loop or a comprehension asks its iterable's ``__iter__`` from.
_LOOP_OPS = frozenset({dis.opmap["GET_ITER"]})
#: Calls (of a builtin that reads its operand whole: ``sorted``, ``list``, ``set``, ``iter``; the
#: tests' own ``sorted`` is a function of ``module_views``' calling Python's, ``BOUND_CODE``) whose
#: answer a loop's ``GET_ITER`` takes next: ``for x in sorted(r)`` loops over ``r``'s items.
_CALL_OPS = frozenset(dis.opmap[name] for name in ("CALL", "CALL_FUNCTION", "CALL_KW") if name in dis.opmap)
#: The instruction ``in`` and ``not in`` (its argument 1) are (Python 3.9+).
_CONTAINS = dis.opmap.get("CONTAINS_OP")
#: Per code object of the tests': each offset (inline caches too) -> its instruction's opcode and the next one's.
_OPS: dict[types.CodeType, dict[int, tuple[int, int | None]]] = {}
#: Types whose items a call returned stand for the items it took (a dict: its keys, as iterating it gives).
_CONTAINERS = (list, tuple, set, frozenset, dict)
#: The code of the tests' stand-ins that take an iterator of their operand to loop over it
#: (``pairing``: ``enumerate``, ``map`` of one iterable, ``filter``), registered by ``loops_over``.
_LOOPING: set[types.CodeType] = set()


#: Of ``_LOOPING``, the stand-ins that hand their operand's items on as they are (``zip``'s reading of
#: an operand, ``enumerate``): a loop over their answer that checks no item reads the operand whole.
_PASSING_ON: set[types.CodeType] = set()


def passes_items_on(function: Callable[..., Any]) -> Callable[..., Any]:
    """Register ``function`` (already ``loops_over``'s) as one whose answer holds its operand's
    items untouched, so ``looped_here`` follows its answer to the tests' loop; ``function`` itself."""
    _PASSING_ON.add(function.__code__)
    return function


def loops_over(function: Callable[..., Any]) -> Callable[..., Any]:
    """Register ``function``, a stand-in of the tests' builtins, as a loop over its operand for
    ``looped_here`` (``for i, x in enumerate(r)``, ``all(map(is_prime, r))``); ``function`` itself."""
    _LOOPING.add(function.__code__)
    return function


def looped_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__iter__`` asking) is the tests'
    own code at a loop's or a comprehension's start, at a call whose answer such a start takes
    next (``for x in sorted(r)``, ``all(is_prime(x) for x in list(r))``: ``_instruction_at``), or
    a stand-in of theirs ``loops_over`` registered (their ``all``, ``any``, ``enumerate``, ``map``,
    ``filter``, ``zip``'s reading of an operand): a check over each item, which an empty value
    holds vacuously. ``list(r) == []``, ``sorted(r)`` compared, ``x in r`` and
    a loop that checks none of its items (``for _ in q: n += 1``, ``[x for x in q] == []``:
    ``item_free_loops``) read it whole or otherwise, and are no such loop here."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    code = frame.f_code
    if code in _LOOPING:
        return not _handed_to_item_free_loop(frame)
    wrapped = code in BOUND_CODE  # the tests' ``sorted``/``iter``: a function calling Python's
    if wrapped:
        if frame.f_back is None:
            return False
        frame = frame.f_back
        code = frame.f_code
    if code.co_filename not in TESTS_FILES or not 0 <= frame.f_lasti < len(code.co_code):
        return False
    op, after = _instruction_at(code, frame.f_lasti)
    fed = op in _CALL_OPS and after in _LOOP_OPS
    if op in _LOOP_OPS and not wrapped:  # ``n += 1`` or ``raise`` for each item: a whole reading
        return not checks_no_item(code, frame.f_lasti)
    return fed and not feeds_item_free_loop(code, frame.f_lasti)  # ``for _ in sorted(q): n += 1``: whole


def feeds_item_free_loop(code: types.CodeType, at: int) -> bool:
    """Whether the call at offset ``at`` of the tests' ``code`` (a caller's ``f_lasti``, which may
    point into its inline caches) hands its answer straight to a loop that checks none of its items
    (``item_free_loops``: ``for _ in zip(c.keys(), c.values()): n += 1``, ``sum(1 for _ in
    sorted(q)) == 0``). Why: such a loop reads the value whole, as ``for _ in q: n += 1`` does, and a
    right cache the tests cleared and counted so scored 0.5 (each item-free loop over ``q`` itself kept 1.0)."""
    if code.co_filename not in TESTS_FILES:
        return False
    plain = plain_instructions(code)
    start = max((n for n, i in enumerate(plain) if i.offset <= at), default=None)
    if start is None or plain[start].opname not in ("CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_KW") or start + 1 >= len(plain):
        return False
    after = plain[start + 1]
    return after.opname == "GET_ITER" and checks_no_item(code, after.offset)


def _handed_to_item_free_loop(frame: types.FrameType) -> bool:
    """Whether the stand-in running in ``frame`` (or below the stand-in the tests called) is one
    that passes items on (``passes_items_on``: ``zip``, ``enumerate``), called by the tests where
    its answer feeds a loop that checks none of its items (``feeds_item_free_loop``), or a copy
    of it the tests compare or count right where it is made (``compared_copies``: ``list(zip(c.keys(),
    c.values())) == []``, where a right cleared cache scored 0.5). ``map``, ``filter``, ``all``,
    ``any`` and ``sum`` run a check of their own on each item, and stay loops."""
    below: types.FrameType | None = None
    for _ in range(6):
        if frame.f_code.co_filename in TESTS_FILES:
            return below is not None and below.f_code in _PASSING_ON \
                and (feeds_item_free_loop(frame.f_code, frame.f_lasti)
                     or compared_copy_at(frame.f_code, frame.f_lasti))
        if frame.f_back is None:
            return False
        below, frame = frame, frame.f_back
    return False


def tests_instruction(depth: int) -> tuple[types.CodeType, int, list[dis.Instruction], int] | None:
    """The frame ``depth`` levels above the caller, where it is the tests' own code: its code, its
    ``f_lasti``, its instructions (``plain_instructions``) and the index of the one ``f_lasti``
    falls in (it may point into a call's inline caches); else None."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return None
    code, at = frame.f_code, frame.f_lasti
    if code.co_filename not in TESTS_FILES or not 0 <= at < len(code.co_code):
        return None
    plain = plain_instructions(code)
    start = max((n for n, i in enumerate(plain) if i.offset <= at), default=None)
    return None if start is None else (code, at, plain, start)


def view_looped_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__getattr__`` asking a view,
    ``d.items``) is the tests' own code at that method's load, whose call's answer a loop's
    ``GET_ITER`` takes next (``for k, v in d.items()``, ``all(v == k * k for k, v in d.items())``)
    and whose body looks at its items (``item_free_loops``). Why: the view is the value's items
    read here (``Remote._container_data``), a whole reading to ``_snapshot``, so a forged mapping
    emptied by ``show(d)`` passed ``len(d) == 3`` and then that loop (1.0)."""
    found = tests_instruction(depth)
    if found is None:
        return False
    code, _, plain, start = found
    if plain[start].opname not in ("LOAD_METHOD", "LOAD_ATTR"):
        return False
    following = plain[start + 1:start + 4]
    if following[:1] and following[0].opname == "PRECALL":  # Python 3.11's call is PRECALL, CALL
        following = following[1:]
    if [i.opname for i in following[:2]] != ["CALL", "GET_ITER"]:
        return False
    return not checks_no_item(code, following[1].offset)


def not_in_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__contains__`` asking) is the
    tests' own code at ``x not in r``: true over no items, a check an emptied value holds
    vacuously (``Remote.__contains__``); ``x in r`` fails over none and is no such check."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    code, at = frame.f_code, frame.f_lasti
    return code.co_filename in TESTS_FILES and _CONTAINS is not None and 0 <= at < len(code.co_code) - 1 \
        and code.co_code[at] == _CONTAINS and code.co_code[at + 1] == 1  # CONTAINS_OP 1: ``not in``


def _instruction_at(code: types.CodeType, offset: int) -> tuple[int | None, int | None]:
    """The opcode of the instruction ``offset`` of ``code`` falls in (a caller's ``f_lasti``
    may point into a call's inline caches) and of the one after it. Why the one after: a builtin
    (``sorted``, ``list``) asked ``__iter__`` at a call whose answer a loop's ``GET_ITER`` takes
    next, so a forged value emptied by ``show(r)`` passed ``for x in sorted(r): assert
    is_prime(x)`` (1.0) where ``for x in r`` failed."""
    ops = _OPS.get(code)
    if ops is None:
        instructions = list(dis.get_instructions(code))
        ops = {}
        for one, after in zip(instructions, [*instructions[1:], None]):
            end = after.offset if after is not None else len(code.co_code)
            for at in range(one.offset, end, 2):
                ops[at] = (one.opcode, after.opcode if after is not None else None)
        if len(_OPS) >= MAX_CODES:  # a long-lived process meets many tests' sources
            _OPS.clear()
        _OPS[code] = ops
    return ops.get(offset, (None, None))


def returned_items(value: Any) -> list[Any]:
    """The items a call's answer stands for: a container's items (a dict's keys), else itself."""
    return list(value) if type(value) in _CONTAINERS else [value]


def taken_back(before: list[Any], after: list[Any], returned: Iterable[Any], calls: int) -> int:
    """How many of the items lost from ``before`` to ``after`` the calls between may have taken:
    one per call, or as many of the lost items as they returned (``pop``, ``drain``), if more."""
    lost = _keys(before) - _keys(after)
    return max(calls, sum((_keys(returned) & lost).values()))


def gained(before: list[Any], after: list[Any], handed: list[Any]) -> bool:
    """Whether ``after`` holds an item that neither ``before`` nor ``handed`` (what the tests'
    calls passed in since) holds as many times: one the value made up, as a forged ``reset`` leaving
    ``[2]`` after 4, 4, 4 did (``Remote._emptied_unseen``)."""
    return bool(_keys(after) - _keys(before) - _keys(handed))


def _keys(items: Iterable[Any]) -> collections.Counter[str]:
    """``items`` as a multiset of ``values.item_key``: the same items as ``reader.same_items`` sees."""
    return collections.Counter(map(item_key, items))
