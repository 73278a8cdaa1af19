"""The tests' compiled code as the bytecode readers see it, read once per code object.

Why one module: ``shrinking``, ``item_free_loops`` and ``asserted_truths`` each ask questions of
the tests' own instructions (inline caches left out) from inside a value's dunder method, many
times per test; each kept its own bounded per-code memo and listed the instructions again for
every new offset. The listing and the bound live here once.
"""

from __future__ import annotations

import dis
import sys
import types
from collections.abc import Callable
from typing import NamedTuple

#: The Python versions whose compiled shapes the readers (``shrinking``, ``item_free_loops``,
#: ``asserted_truths``, ``zipped_views``) were written and tested against. Why a list: the shapes
#: change from version to version (3.10 has no ``co_positions`` and calls through ``CALL_FUNCTION``;
#: 3.12 inlines list comprehensions and drops ``PRECALL``, read here by ``comprehension_at``; 3.13
#: asks ``bool`` at a ``TO_BOOL`` before its jump (``branch_at``) and fuses loads and stores
#: (``_unfused``)), and where a version's shapes were not read, some readers answered wrongly both
#: ways on the same tests: a counting loop over a right cleared queue read as a check (a false 0 on
#: 3.10), ``assert r`` of a generator yielding nothing read as no assertion (a forged one passed on
#: 3.13 before ``branch_at``). A version joins only once the sandbox's forging tests pass under it.
READ_ON = frozenset({(3, 11), (3, 12), (3, 13)})
#: Code objects remembered per memo: a long-lived process meets many tests' sources.
MAX_CODES = 512
_PLAIN: dict[types.CodeType, list[dis.Instruction]] = {}


def plain_instructions(code: types.CodeType) -> list[dis.Instruction]:
    """``code``'s instructions, inline caches (``CACHE``) left out."""
    plain = _PLAIN.get(code)
    if plain is None:
        plain = [part for i in dis.get_instructions(code) if i.opname != "CACHE" for part in _unfused(i)]
        if len(_PLAIN) >= MAX_CODES:
            _PLAIN.clear()
        _PLAIN[code] = plain
    return plain


#: Python 3.13's fused instructions: each is two of 3.11's, one name each (``argval`` a pair).
_FUSED = {"LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"), "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
          "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST")}


def _unfused(instruction: dis.Instruction) -> list[dis.Instruction]:
    """``instruction``, or the two 3.11 instructions a 3.13 fused one stands for (the second at the
    odd offset after it: no instruction of its own starts there, and it is no jump's target), so
    the readers see one shape: ``STORE_FAST x`` then ``LOAD_FAST x`` for ``STORE_FAST_LOAD_FAST``."""
    names = _FUSED.get(instruction.opname)
    if names is None or not isinstance(instruction.argval, tuple) or len(instruction.argval) != 2:
        return [instruction]
    first, second = names
    untargeted = {"label": None} if "label" in instruction._fields else {"is_jump_target": False}
    return [instruction._replace(opname=first, opcode=dis.opmap[first], argval=instruction.argval[0],
                                 argrepr=str(instruction.argval[0])),
            instruction._replace(opname=second, opcode=dis.opmap[second], argval=instruction.argval[1],
                                 argrepr=str(instruction.argval[1]), offset=instruction.offset + 1, **untargeted)]


def branch_at(instructions: list[dis.Instruction], n: int) -> int:
    """The index of the conditional jump that the instruction at index ``n`` (where a caller's
    ``__bool__`` was asked) feeds: itself, or on Python 3.13 the jump after its ``TO_BOOL``."""
    if instructions[n].opname == "TO_BOOL" and n + 1 < len(instructions):
        return n + 1
    return n


def remembered(found: dict[types.CodeType, dict[int, bool]], code: types.CodeType, offset: int,
               compute: Callable[[types.CodeType, int], bool]) -> bool:
    """``compute(code, offset)``, kept in ``found`` (at most ``MAX_CODES`` code objects: past that,
    a new one's answers are computed each time rather than kept)."""
    known = found.setdefault(code, {}) if len(found) < MAX_CODES or code in found else {}
    if offset not in known:
        known[offset] = compute(code, offset)
    return known[offset]


def unsupported_python(version: tuple[int, int] | None = None) -> str | None:
    """Why the tests of ``code_tests`` cannot be judged on ``version`` (default: this interpreter's),
    or None where they can (``READ_ON``)."""
    major, minor = version if version is not None else sys.version_info[:2]
    if (major, minor) in READ_ON:
        return None
    known = ", ".join(f"{a}.{b}" for a, b in sorted(READ_ON))
    return (f"the trainer runs Python {major}.{minor}, and the checks that catch forged answers read the tests' "
            f"bytecode as Python {known} compiles it (on other versions they misread it: forged answers pass and "
            f"right ones score 0)")


#: The comprehensions ``comprehension_at`` reads (a dict comprehension is none: its body is no plain copy).
_COMPREHENSIONS = frozenset({"<listcomp>", "<setcomp>", "<genexpr>"})
#: Python 3.12+ (PEP 709) builds an inlined comprehension's answer with these, named as 3.11 names its code.
_INLINED = {"BUILD_LIST": "<listcomp>", "BUILD_SET": "<setcomp>"}


class Comprehension(NamedTuple):
    """A comprehension of the tests', the same whether it runs as code of its own (3.11, a
    generator expression on 3.12+) or inlined in the tests' frame (3.12+ lists, sets, dicts)."""

    #: ``<listcomp>``, ``<setcomp>`` or ``<genexpr>``.
    kind: str
    #: The instructions its ``FOR_ITER`` is one of (its own code's, or the tests' frame's).
    body: list[dis.Instruction]
    #: The index of its ``FOR_ITER`` in ``body``.
    for_iter: int
    #: The index in the tests' instructions of the first one after its answer is made.
    after: int
    #: The index in the tests' instructions of the last one before its answer began (-1: none).
    before: int


def comprehension_at(instructions: list[dis.Instruction], get_iter: int) -> Comprehension | None:
    """The comprehension whose iterable the ``GET_ITER`` at index ``get_iter`` of the tests'
    ``instructions`` (``plain_instructions``) takes, or None (a ``for``, or a shape not read).
    Why one helper: 3.11 makes a code object and calls it (``MAKE_FUNCTION``, ``GET_ITER``,
    ``PRECALL``, ``CALL 0``); 3.12 drops ``PRECALL`` and inlines list, set and dict comprehensions
    (``GET_ITER``, ``LOAD_FAST_AND_CLEAR`` of each target, ``SWAP``, ``BUILD_LIST 0``, ``SWAP``, ``FOR_ITER``)."""
    n = get_iter + 1
    if n < len(instructions) and instructions[n].opname == "LOAD_FAST_AND_CLEAR":
        return _inlined(instructions, get_iter)
    if n < len(instructions) and instructions[n].opname == "PRECALL":
        n += 1
    if n >= len(instructions) or instructions[n].opname != "CALL" or instructions[n].arg != 0:
        return None
    made = next((m for m in range(get_iter - 1, -1, -1) if instructions[m].opname == "MAKE_FUNCTION"), None)
    if made is None or made == 0:
        return None
    loaded = instructions[made - 1].argval
    if not isinstance(loaded, types.CodeType) or loaded.co_name not in _COMPREHENSIONS:
        return None
    inner = plain_instructions(loaded)
    start = next((m for m, i in enumerate(inner) if i.opname == "FOR_ITER"), None)
    if start is None:
        return None
    return Comprehension(loaded.co_name, inner, start, n + 1, made - 2)


def _inlined(instructions: list[dis.Instruction], get_iter: int) -> Comprehension | None:
    """``comprehension_at`` of a comprehension PEP 709 inlined (Python 3.12+)."""
    n = get_iter + 1
    saved = 0
    while n < len(instructions) and instructions[n].opname == "LOAD_FAST_AND_CLEAR":
        saved, n = saved + 1, n + 1
    shape = [i.opname for i in instructions[n:n + 4]]
    if len(shape) < 4 or shape[0] != "SWAP" or shape[1] not in _INLINED or instructions[n + 1].arg != 0 \
            or shape[2:] != ["SWAP", "FOR_ITER"]:
        return None
    for_iter = n + 3
    end = instructions[for_iter].argval
    index = {i.offset: m for m, i in enumerate(instructions)}
    m = index.get(end) if isinstance(end, int) else None
    if m is None or instructions[m].opname != "END_FOR":
        return None
    m += 1
    if m < len(instructions) and instructions[m].opname == "POP_TOP":  # 3.13 ends a ``for`` with END_FOR, POP_TOP
        m += 1
    if m >= len(instructions) or instructions[m].opname != "SWAP":
        return None
    m += 1
    restored = 0
    while m < len(instructions) and restored < saved and instructions[m].opname in ("STORE_FAST", "POP_TOP"):
        restored, m = restored + 1, m + 1
    if restored != saved:
        return None
    before = _value_start(instructions, get_iter) - 1
    if before > 0 and instructions[before].opname == "PUSH_NULL":  # 3.13 loads a callable, then its NULL
        before -= 1
    return Comprehension(_INLINED[shape[1]], instructions, for_iter, m, before)


def _value_start(instructions: list[dis.Instruction], end: int) -> int:
    """The index of the first instruction of the one value the instructions before index ``end``
    leave on the stack last (the iterable a ``GET_ITER`` takes), or 0 where no straight run of
    instructions makes it (a jump between: a conditional expression)."""
    depth = 0
    for n in range(end - 1, -1, -1):
        i = instructions[n]
        if i.opcode in dis.hasjrel or i.opcode in dis.hasjabs:
            return 0
        try:
            depth += dis.stack_effect(i.opcode, i.arg if i.opcode >= dis.HAVE_ARGUMENT else None, jump=False)
        except ValueError:
            return 0
        if depth == 1:
            return n
    return 0


def pushes_null(instruction: dis.Instruction) -> bool:
    """Whether ``instruction`` pushes a ``NULL`` (or ``self``) below what it loads, for the call
    after it: ``LOAD_GLOBAL`` with its argument's low bit (3.11+), ``LOAD_ATTR`` with it (3.12+,
    where it stands for 3.11's ``LOAD_METHOD``, which ``dis`` counts apart)."""
    if instruction.opname == "LOAD_GLOBAL" or (instruction.opname == "LOAD_ATTR" and sys.version_info >= (3, 12)):
        return bool((instruction.arg or 0) & 1)
    return False
