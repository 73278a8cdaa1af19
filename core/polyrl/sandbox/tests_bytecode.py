"""The tests' compiled code as the bytecode readers see it, read once per code object.

Why one module: ``shrinking``, ``item_free_loops`` and ``asserted_truths`` each ask questions of
the tests' own instructions (inline caches left out) from inside a value's dunder method, many
times per test; each kept its own bounded per-code memo and listed the instructions again for
every new offset. The listing and the bound live here once.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable

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
