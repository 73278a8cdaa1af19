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

#: The Python versions whose compiled shapes the readers (``shrinking``, ``item_free_loops``,
#: ``asserted_truths``, ``zipped_views``) were written and tested against. Why a list: the shapes
#: change from version to version (3.10 has no ``co_positions`` and calls through ``CALL_FUNCTION``;
#: 3.12 inlines list comprehensions and drops ``PRECALL``; 3.13 compiles ``assert`` with other
#: jumps), and on each other version some readers answered wrongly both ways, run on the same
#: tests: a counting loop over a right cleared queue read as a check (a false 0 on 3.10 and 3.12),
#: ``assert r`` of a generator yielding nothing read as no assertion (a forged one passed on 3.13).
READ_ON = frozenset({(3, 11)})
#: Code objects remembered per memo: a long-lived process meets many tests' sources.
MAX_CODES = 512
_PLAIN: dict[types.CodeType, list[dis.Instruction]] = {}


def plain_instructions(code: types.CodeType) -> list[dis.Instruction]:
    """``code``'s instructions, inline caches (``CACHE``) left out."""
    plain = _PLAIN.get(code)
    if plain is None:
        plain = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
        if len(_PLAIN) >= MAX_CODES:
            _PLAIN.clear()
        _PLAIN[code] = plain
    return plain


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
