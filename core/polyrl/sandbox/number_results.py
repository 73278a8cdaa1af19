"""Whether what a sample's number object answers for ``-x``, ``+x``, ``~x``, ``abs(x)`` or
``round(x)`` is what Python gives for the number it is compared as.

Why: those run the object's own methods in the sample (``remote.Remote._unary``), so an object
equal to 4, 6, 8 or 9 (its ``==``, orderings and ``%`` computed on that number) whose ``__abs__``
or ``__round__`` gave 2 passed a tests' ``is_prime`` that starts with ``n = abs(n)`` or ``n =
round(n)``: a forged ``primes`` scored 1.0. The same forgery through ``__index__`` is refused by
``remote._agrees``; this is its counterpart for the unary operators.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable
from typing import Any

#: Python's unary operators on a plain number (``~`` of an int only).
_UNARY: dict[str, Callable[[Any], Any]] = {"-": operator.neg, "+": operator.pos, "abs": abs}


def unary_agrees(how: str, number: int | float | None, result: Any) -> bool:
    """Whether ``result`` (a number, or the number a sample's value answering it is compared as;
    None: none known) is ``how`` of ``number``, the value's own number. Nothing to agree with
    (no number, ``~`` of a float, a result that is no number): it agrees."""
    if number is None or not _plain_number(result):
        return True
    if how == "~":
        return type(number) is not int or result == ~number
    if how not in _UNARY:
        return True
    return _same(result, _UNARY[how](number))


def round_agrees(number: int | float | None, ndigits: int | None, result: Any) -> bool:
    """Whether ``result`` is ``round(number, ndigits)``: exactly for an int; for a float, either
    neighbour at an exact half (a half-up ``__round__`` is as right as Python's half-even), and
    within one unit of the last digit kept where ``ndigits`` is given (a decimal ``__round__`` of
    2.675 gives 2.68, Python's float 2.67)."""
    if number is None or not _plain_number(result):
        return True
    if type(number) is int or not math.isfinite(number):
        return _same(result, number if ndigits is None else round(number, ndigits))
    if ndigits is None:
        low = math.floor(number)
        return result == round(number) or (number - low == 0.5 and result in (low, low + 1))
    return abs(result - round(number, ndigits)) <= 10.0 ** -ndigits * (1 + 1e-9)  # 2.68 - 2.67 is a hair over 0.01


def _plain_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _same(result: Any, expected: int | float) -> bool:
    return bool(result == expected) or (expected != expected and result != result)
