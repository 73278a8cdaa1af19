"""Loops of the tests' that check none of their items: an empty value there is seen, not trusted.

Why: ``shrinking.looped_here`` takes every loop's start for a check over each item, which an
emptied value holds vacuously, so a right queue or stack the tests clear and then count
(``n = 0; for _ in q: n += 1; assert n == 0``, ``sum(1 for _ in q) == 0``), copy
(``[x for x in s] == []``) or loop over with a body that fails on any item (``for _ in s: raise
AssertionError('left')``) scored 0 where no other whole reading saw it empty. Such a loop is
the tests reading the value whole: its body never looks at an item for a verdict (it counts,
or copies each item as it is, or fails whatever the item), so an empty value cannot pass it
vacuously; the tests see how many items there were, as ``len(q) == 0`` would show them.

Read from the bytecode (a ``for``'s ``GET_ITER``/``FOR_ITER`` in the tests' frame; a
comprehension's, as ``tests_bytecode.comprehension_at`` finds it on 3.11 to 3.13); any other
shape is a loop that checks its items, as before.
"""

from __future__ import annotations

import dis
import types

from polyrl.sandbox.self_compared import compared_loop_at
from polyrl.sandbox.tests_bytecode import Comprehension, comprehension_at, plain_instructions, pushes_null, remembered

#: Stores of a loop's target names.
_STORES = frozenset({"STORE_NAME", "STORE_FAST", "STORE_GLOBAL"})
#: Loads that read a name (a target's, where they name one).
_LOADS = frozenset({"LOAD_NAME", "LOAD_FAST", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_CLASSDEREF"})
#: What a counting body (``n += 1``, ``1`` of ``sum(1 for _ in q)``) may run besides its
#: target's stores: no call, comparison or branch, so nothing in it is a verdict on an item.
_COUNTING = frozenset({"LOAD_CONST", "BINARY_OP", "POP_TOP", "NOP", "RESUME", "YIELD_VALUE", "LIST_APPEND",
                       "SET_ADD", "JUMP_BACKWARD", "LOAD_NAME", "LOAD_FAST", "LOAD_GLOBAL"}) | _STORES
#: Ops after which control may leave a body other than by raising.
_LEAVES = frozenset({"RETURN_VALUE", "YIELD_VALUE", "FOR_ITER", "SEND"})
#: The tests' own objects whose ``fail`` raises (unittest's ``self``, ``pytest``): ``self.fail('left')``.
_FAILING = frozenset({"self", "pytest"})
#: (pops, pushes) of what may build the other side of a comparison after a copy (``== [2, 3]``,
#: ``!= e.xs``, ``== set()``, ``== sorted(want)``); of ``_COUNTED_POPS``, pops beyond their arg.
_STACK = {"LOAD_CONST": (0, 1), "LOAD_NAME": (0, 1), "LOAD_FAST": (0, 1), "LOAD_GLOBAL": (0, 1),
          "LOAD_DEREF": (0, 1), "PUSH_NULL": (0, 1), "LOAD_ATTR": (1, 1), "LOAD_METHOD": (1, 2),
          "BUILD_LIST": (0, 1), "BUILD_SET": (0, 1), "BUILD_TUPLE": (0, 1), "LIST_EXTEND": (1, 0),
          "SET_UPDATE": (1, 0), "PRECALL": (0, 0), "KW_NAMES": (0, 0), "CALL": (2, 1), "COMPARE_OP": (2, 1)}
_COUNTED_POPS = frozenset({"BUILD_LIST", "BUILD_SET", "BUILD_TUPLE", "CALL"})
#: Per code object of the tests': ``GET_ITER`` offset -> whether its loop checks no item.
_FOUND: dict[types.CodeType, dict[int, bool]] = {}


def checks_no_item(code: types.CodeType, get_iter: int) -> bool:
    """Whether the loop that starts at the ``GET_ITER`` at offset ``get_iter`` of ``code`` (a
    ``for`` or a comprehension) reads its value whole: counts, copies or fails on every item. A
    comprehension whose answer is compared with another reading of the same value
    (``self_compared.compared_loop_at``: ``[1 for x in r] == list(r)``) checks each item against
    it and is no such loop."""
    return remembered(_FOUND, code, get_iter, _classify)


def _classify(code: types.CodeType, get_iter: int) -> bool:
    if compared_loop_at(code, get_iter):
        return False
    instructions = plain_instructions(code)
    at = next((n for n, i in enumerate(instructions) if i.offset == get_iter), None)
    if at is None or instructions[at].opname != "GET_ITER" or at + 1 >= len(instructions):
        return False
    following = instructions[at + 1]
    if following.opname == "FOR_ITER":  # a ``for`` of the tests' own frame
        body = _body(instructions, at + 1)
        if body is None:
            return False
        targets, rest = body
        return _counts(targets, rest) or _fails(code, get_iter, targets, rest)
    made = comprehension_at(instructions, at)
    if made is None:
        return False
    body = _body(made.body, made.for_iter)
    if body is None:
        return False
    targets, rest = body
    copies = made.kind in ("<listcomp>", "<setcomp>") and len(targets) == 1 and [i.opname for i in rest] == [
        "LOAD_FAST", "LIST_APPEND" if made.kind == "<listcomp>" else "SET_ADD", "JUMP_BACKWARD"] \
        and rest[0].argval == targets[0]
    return (copies and _kept_whole(instructions, made)) or _counts(targets, rest)


def _kept_whole(instructions: list[dis.Instruction], made: Comprehension) -> bool:
    """Whether the copy comprehension ``made`` (``comprehension_at``'s) made is compared
    equal or unequal (``[x for x in r] == [2, 3]``, ``set() != {x for x in r}``) or counted
    (``len``) right where it is made. Why: a copy that is stored, looped over, handed to a call
    (``all([x for x in r])`` is the loop ``all(r)`` is), asked ``4 not in`` or compared by
    ``<=`` holds over an emptied value just as the loop over ``r`` would: a forged ``primes``
    emptied by ``show(r)`` passed ``{x for x in r} <= {2, 3, 5, 7}`` (1.0)."""
    following = instructions[made.after:]
    if following and following[0].opname in ("PRECALL", "CALL"):
        callee = instructions[made.before] if made.before >= 0 else None
        return callee is not None and callee.opname in ("LOAD_NAME", "LOAD_GLOBAL") and callee.argval == "len"
    above = 0  # values on the stack above the copy: what builds the other side of ``==``
    for i in following:
        effect = _STACK.get(i.opname)
        if effect is None:
            return False
        pops = (i.arg or 0) + effect[0] if i.opname in _COUNTED_POPS else effect[0]
        pushes = effect[1] + pushes_null(i)
        if pops > above or (i.opname in ("LIST_EXTEND", "SET_UPDATE") and above < 2):  # it takes the copy
            return i.opname == "COMPARE_OP" and i.argval in ("==", "!=") and above <= 1
        above += pushes - pops
    return False


def _body(instructions: list[dis.Instruction], for_iter: int) -> tuple[list[str], list[dis.Instruction]] | None:
    """The target names a ``FOR_ITER`` stores each item in and the instructions of its body after
    them (up to where the loop ends); None where the target is no plain name or names."""
    end_offset = instructions[for_iter].argval
    body = [i for i in instructions[for_iter + 1:] if i.offset < end_offset]
    if not body:
        return None
    count = 1
    if body[0].opname == "UNPACK_SEQUENCE":
        count, body = body[0].arg or 0, body[1:]
    stores, rest = body[:count], body[count:]
    if len(stores) != count or any(i.opname not in _STORES for i in stores):
        return None
    return [str(i.argval) for i in stores], rest


def _counts(targets: list[str], rest: list[dis.Instruction]) -> bool:
    """A body that reads no target and runs only ``_COUNTING`` instructions."""
    return all(i.opname in _COUNTING and not (i.opname in _LOADS and i.argval in targets) for i in rest)


def _fails(code: types.CodeType, get_iter: int, targets: list[str], rest: list[dis.Instruction]) -> bool:
    """A body that raises before any branch, whatever its item (``raise AssertionError(...)``,
    ``assert False, x``, unittest's ``self.fail(...)``, ``pytest.fail(...)``), with no ``try``
    around the raise that is not around the loop too."""
    if len(rest) >= 2 and rest[0].opname in _LOADS and rest[0].argval in _FAILING \
            and rest[1].opname in ("LOAD_METHOD", "LOAD_ATTR") and rest[1].argval == "fail":
        raised = next((n for n, i in enumerate(rest) if i.opname == "POP_TOP"), None)  # the call's end
    else:
        raised = next((n for n, i in enumerate(rest) if i.opname == "RAISE_VARARGS"), None)
    if raised is None:
        return False
    for i in rest[:raised]:
        if i.opname in _LEAVES or i.opcode in dis.hasjrel or i.opcode in dis.hasjabs \
                or (i.opname == "LOAD_CONST" and isinstance(i.argval, types.CodeType)):
            return False
    offset = rest[raised].offset
    handlers = getattr(dis.Bytecode(code), "exception_entries", None)
    if handlers is None:
        return False
    return all(e.start <= get_iter < e.end for e in handlers if e.start <= offset < e.end)
