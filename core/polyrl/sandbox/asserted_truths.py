"""Whether a ``bool`` the tests ask of a value is what an ``assert`` of theirs checks.

Why: Python's ``bool`` of a generator (any iterator without ``__len__``) is True whatever it will
yield, so a forged ``primes`` returning a generator that yields nothing passed ``assert r and
all(is_prime(x) for x in r)`` (1.0) where the right one yields 2, 3, 5 and is checked item by
item: the loop held vacuously. ``Remote._iterate`` fails such a loop over no items where the
tests asserted the value true just before (``assert r``, ``assert r and ...``, ``if not r: raise
...``): they expect items there. A ``bool`` in an ``if r:`` or a ``while`` that runs on without a
raise is no such expectation (an empty right generator keeps it), nor is ``bool(r)`` itself.

Read from the bytecode of the tests' frame (Python 3.11's conditional jumps): the branch taken
when the value is false starts with ``LOAD_ASSERTION_ERROR`` or runs straight to a
``RAISE_VARARGS``; any other shape is no assertion, as before. unittest's ``self.assertTrue(r)``
asks the ``bool`` inside unittest, whose false branch raises: called from the tests' own code it is
their assertion too (a forged generator yielding nothing passed ``self.assertTrue(r)`` and then
``for x in r: self.assertTrue(is_prime(x))``, 1.0, in a ``unittest.TestCase``).
"""

from __future__ import annotations

import dis
import sys
import types
import unittest

from polyrl.sandbox.tests_bytecode import branch_at, plain_instructions, remembered
from polyrl.sandbox.tests_guard import TESTS_FILES

#: Conditional jumps taken when the value is true (the next instruction is its false branch) ...
_IF_TRUE = frozenset({"POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_IF_TRUE",
                      "JUMP_IF_TRUE_OR_POP"})
#: ... and when it is false (the jump's target is its false branch).
_IF_FALSE = frozenset({"POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_IF_FALSE",
                       "JUMP_IF_FALSE_OR_POP"})
#: Most instructions from the false branch's start to its raise (``raise AssertionError(f'...')``).
_REACH = 24
#: Per code object of the tests': offset -> whether the ``bool`` asked there is asserted.
_FOUND: dict[types.CodeType, dict[int, bool]] = {}
#: unittest's ``assertTrue``, whose ``bool`` of its argument is the assertion of whoever calls it.
_ASSERT_TRUE = unittest.TestCase.assertTrue.__code__


def asserted_here(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up (the caller of the ``__bool__`` asking) is the tests'
    own code at a conditional jump whose false branch raises, or unittest's ``assertTrue`` the
    tests called (module doc)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    code, at = frame.f_code, frame.f_lasti
    if code is _ASSERT_TRUE:
        return frame.f_back is not None and frame.f_back.f_code.co_filename in TESTS_FILES
    if code.co_filename not in TESTS_FILES or not 0 <= at < len(code.co_code):
        return False
    return remembered(_FOUND, code, at, _asserted)


def _asserted(code: types.CodeType, offset: int) -> bool:
    instructions = plain_instructions(code)
    index = {i.offset: n for n, i in enumerate(instructions)}
    at = index.get(offset)
    if at is None:
        return False
    at = branch_at(instructions, at)
    jump = instructions[at]
    if jump.opname in _IF_TRUE:
        start = at + 1
    elif jump.opname in _IF_FALSE and isinstance(jump.argval, int) and jump.argval in index:
        start = index[jump.argval]
    else:
        return False
    for n, instruction in enumerate(instructions[start:start + _REACH]):
        if instruction.opname == "RAISE_VARARGS" or (n == 0 and instruction.opname == "LOAD_ASSERTION_ERROR"):
            return True
        if instruction.opcode in dis.hasjrel or instruction.opcode in dis.hasjabs \
                or instruction.opname in ("RETURN_VALUE", "YIELD_VALUE") or (n and instruction.is_jump_target):
            return False
    return False
