"""Numbers too long for Python's parsers: where they are, for one error line.

Why: since Python 3.11 ``int()`` refuses a decimal string longer than ``sys.get_int_max_str_digits()``
(4300 by default) with a plain ``ValueError``, which ``tomllib`` and ``json`` let through as is, not as
their own decode errors. A config line ``steps = 999...`` (5000 digits), ``--set train.steps=999...``
or a JSONL row holding such a number was a traceback instead of an ``error:`` line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator

#: The fix for a setting (a config line, a ``--set``) holding such a number.
SETTING_FIX = "write the setting's real value; no polyrl setting needs so many digits"
#: An integer too long for any setting or value: a run of 65+ decimal digits (TOML allows ``_``
#: between them) with an optional sign, not part of a word, a float (``1.5``, ``1e9``), a date or a
#: dotted key (``a.123``): ``float()`` has no digit limit. Possessive, so a near miss costs one pass
#: over its digits, not a backtrack per digit. (Which TOML digit runs are keys: ``_toml_values``.)
_NUMBER = r"(?<![\w.:+-])[+-]?+(?P<number>[0-9][0-9_]{64,}+)(?![\w.:+-])"
#: What the scan steps over whole: text in a string is not a number, nor is a TOML comment. An
#: unterminated string runs to the end (the parser failed there first), so each character is read once.
_SKIP = {
    "json": r'"(?:[^"\\]|\\.)*+"?',
    "toml": (r'"""(?:[^"\\]|\\.|"(?!""))*+(?:"{3,5})?'
             r"|'''(?:[^']|'(?!''))*+(?:'{3,5})?"
             r'|"(?:[^"\\\n]|\\.)*+"?'
             r"|'[^'\n]*+'?"
             r"|#[^\n]*+"),
}
#: TOML's structure, which says whether a digit run is a key (text to tomllib: no digit limit) or a
#: value: brackets, braces, ``=``, ``,`` and line ends.
_MARKS = {"json": "", "toml": r"|(?P<mark>[][{}=,\n])"}
_SCANS = {syntax: re.compile(f"{skip}|{_NUMBER}{_MARKS[syntax]}", re.DOTALL) for syntax, skip in _SKIP.items()}


def digit_limit() -> int:
    """Python's limit on the digits ``int()`` reads from text (0: none)."""
    return sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0


def is_digit_limit(exc: BaseException) -> bool:
    """Whether ``exc`` is ``int()``'s refusal of a number past ``digit_limit()`` digits."""
    return isinstance(exc, ValueError) and "integer string conversion" in str(exc)


def too_long_number(text: str, syntax: str = "toml") -> tuple[int, int] | None:
    """(1-based line, digits) of the first integer in ``text`` past ``digit_limit()``, else None.

    ``syntax`` ("toml" or "json") says which strings and comments to step over: a long digit run
    in a string is text, and counting it would point at the wrong line."""
    limit = digit_limit()
    if not limit:
        return None
    matches = _toml_values(text) if syntax == "toml" else _SCANS[syntax].finditer(text)
    for match in matches:
        number = match.group("number")
        if number is not None and (digits := len(number) - number.count("_")) > limit:
            return text.count("\n", 0, match.start("number")) + 1, digits
    return None


def _toml_values(text: str) -> Iterator[re.Match[str]]:
    """The scan's matches in TOML ``text`` that stand where a value does, not where a key does.

    Why: digits in a key are text to tomllib (no limit), so a table header ``[123...]`` or a
    dotted key spaced out (``123... . a = 1``, in a statement or an inline table) before the real
    long value was named instead of it. A key is what starts a statement (a header's brackets included) up to its
    ``=``, and what follows an inline table's ``{`` or ``,``. The arrays and inline tables a value
    has open are a stack: a line inside a multi-line array starts no statement. One step per
    string, comment, number or mark: linear in the text."""
    opened: list[str] = []
    key = True  # the document starts a statement
    for match in _SCANS["toml"].finditer(text):
        mark = match.group("mark")
        if mark is None:
            if not key:
                yield match
        elif mark == "=":
            key = False
        elif mark == "\n":
            key = key or not opened  # a statement ends with its line, unless a value is still open
        elif mark == ",":
            key = opened[-1:] == ["{"]
        elif key and not opened:  # a table header's brackets
            continue
        elif mark in "[{":
            opened.append(mark)
            key = mark == "{"
        elif opened:  # "]" or "}"
            opened.pop()
            key = False


def described(text: str, syntax: str = "toml") -> tuple[int | None, str]:
    """(1-based line or None, "a number of N digits, more than the L Python reads") for ``text``
    (TOML or JSON) whose parse hit the digit limit: what the config, ``--set`` and JSONL errors each place."""
    found = too_long_number(text, syntax)
    digits = f"{found[1]} digits" if found else "too many digits"
    return (found[0] if found else None), f"a number of {digits}, more than the {digit_limit()} Python reads"


def problem(text: str) -> str:
    """What to say about ``text`` whose parse hit the digit limit: the line and the length."""
    line, what = described(text)
    return f"line {line} holds {what}" if line is not None else f"holds {what}"
