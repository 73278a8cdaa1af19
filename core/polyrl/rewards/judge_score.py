"""Reading the score out of a judge's reply, in time linear in the reply's length.

Why hand-written scanning instead of one regex per rule: the judge is a remote model and its
reply is untrusted input. Patterns like ``score\\s*(...)?\\s*\\**\\s*(...)?\\s*(NUM)`` backtrack
through every way of splitting a run of spaces between their quantifiers, so a reply of a few
hundred spaces took minutes and stalled training past SIGTERM. Here every regex is a single
quantifier over one character class (or a fixed literal), each scan moves forward, and the JSON
rule decodes a bounded window from a bounded number of ``{`` positions.

The rules (first that finds a number wins) are documented in ``polyrl.rewards.judge``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

Found = tuple[float, "float | None"]

_NUM = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_LABEL = re.compile(r"score|rating|grade", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_OUT_OF = re.compile(r"out\s+of", re.IGNORECASE)
_WORD = re.compile(r"\w")
_WHOLE = re.compile(r"[-+]?\d+")
_TRAILER = re.compile(r"[\s.!*`]*")
_SCORE_KEYS = ("score", "rating", "grade")
#: The JSON rule reads at most this many objects (the last ones), each from a window this long:
#: a score object is a line or two; a reply full of braces must not cost quadratic time.
JSON_STARTS = 64
JSON_WINDOW = 4096
_BRACKET_SPAN = 20  # "Rating (0-10): 6": an echoed range after the label is skipped


def _skip(text: str, i: int, stars: bool = True) -> int:
    """Index of the first character at or after ``i`` that is not whitespace (nor ``*``)."""
    n = len(text)
    while i < n and (text[i].isspace() or (stars and text[i] == "*")):
        i += 1
    return i


def _number_at(text: str, i: int) -> tuple[float, int] | None:
    m = _NUM.match(text, i)
    return (float(m.group()), m.end()) if m else None


def _denominator_at(text: str, i: int) -> tuple[float, int] | None:
    """``/ 10`` or ``out of 10`` starting at ``i`` (after optional whitespace)."""
    i = _skip(text, i, stars=False)
    if text.startswith("/", i):
        i += 1
    else:
        m = _OUT_OF.match(text, i)
        if m is None:
            return None
        i = m.end()
    return _number_at(text, _skip(text, i, stars=False))


def strip_think(text: str) -> str:
    """``text`` without its ``<think>...</think>`` blocks (an unclosed one is left as written)."""
    out: list[str] = []
    pos = 0
    while True:
        opened = _THINK_OPEN.search(text, pos)
        if opened is None:
            break
        closed = _THINK_CLOSE.search(text, opened.end())
        if closed is None:
            break
        out += [text[pos:opened.start()], " "]
        pos = closed.end()
    out.append(text[pos:])
    return "".join(out)


def _json_score(text: str) -> Found | None:
    starts = [m.start() for m in re.finditer(r"\{", text)][-JSON_STARTS:]
    decoder = json.JSONDecoder()
    for start in reversed(starts):  # the last object with a score wins
        try:
            value, _ = decoder.raw_decode(text[start:start + JSON_WINDOW])
        except (ValueError, RecursionError):
            continue
        if not isinstance(value, dict):
            continue
        for key, item in value.items():
            if str(key).lower() in _SCORE_KEYS:
                found = _json_number(item)
                if found is not None:
                    return found
    return None


def _json_number(value: Any) -> Found | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return (float(value), None) if math.isfinite(float(value)) else None
    if isinstance(value, str):
        return bare_score(value.strip())
    return None


def _labelled_at(text: str, i: int) -> Found | None:
    """"Score: 7/10", "**Rating:** 4 out of 5", "Rating (0-10): 6" with the label ending at ``i``."""
    i = _skip(text, i)
    if i < len(text) and text[i] in "([":
        window = text[i + 1:i + 2 + _BRACKET_SPAN]
        ends = [j for j in (window.find(")"), window.find("]")) if j >= 0]
        newline = window.find("\n")
        if ends and (newline < 0 or min(ends) < newline):
            i = _skip(text, i + 2 + min(ends))
    lowered = text[i:i + 2].lower()
    if lowered in ("is", "of"):
        i += 2
    elif lowered[:1] in ("=", ":"):
        i += 1
    number = _number_at(text, _skip(text, i))
    if number is None:
        return None
    value, end = number
    denominator = _denominator_at(text, _skip(text, end))
    return value, (denominator[0] if denominator else None)


def labelled_score(text: str) -> Found | None:
    found = None
    for m in _LABEL.finditer(text):
        candidate = _labelled_at(text, m.end())
        if candidate is not None:
            found = candidate
    return found


def boxed_score(text: str) -> Found | None:
    found = None
    pos = text.find("\\boxed{")
    while pos >= 0:
        i = _skip(text, pos + len("\\boxed{"), stars=False)
        number = _number_at(text, i)
        if number is not None:
            value, i = number
            i = _skip(text, i, stars=False)
            denominator = None
            if text.startswith("/", i):
                den = _number_at(text, _skip(text, i + 1, stars=False))
                if den is not None:
                    denominator, i = den[0], _skip(text, den[1], stars=False)
            if text.startswith("}", i):
                found = (value, denominator)
        pos = text.find("\\boxed{", pos + 1)
    return found


def _glued(text: str, i: int) -> bool:
    """Whether the character before ``i`` makes a number starting at ``i`` part of a longer token."""
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_./")


def _runs_on(text: str, i: int) -> bool:
    """Whether the character at ``i`` continues the token before it (a word character or ``/``)."""
    return i < len(text) and (text[i].isalnum() or text[i] in "_/")


def fraction_score(text: str) -> Found | None:
    """The last "7/10" or "7 out of 10" that is not part of a date, path or longer number."""
    found = None
    resume = 0
    for m in _NUM.finditer(text):
        if m.start() < resume:
            continue
        start = m.start()
        if _glued(text, start):
            if text[start] not in "+-" or _glued(text, start + 1):  # "3-7/10": the 7 may start it
                continue
            start += 1
        den = _denominator_at(text, m.end())
        if den is None:
            continue
        value, end = den
        if _runs_on(text, end):  # "7/10.Good" or "7/10.5x": the whole part alone may end the fraction
            whole = _WHOLE.search(text, m.end(), end)  # the denominator's digits before its "."
            if whole is None or whole.end() >= end or _runs_on(text, whole.end()):
                continue
            value, end = float(whole.group()), whole.end()
        found = (float(text[start:m.end()]), value)
        resume = end
    return found


def bare_score(text: str) -> Found | None:
    """A reply that is nothing but a number, maybe a fraction ("7", "  8. ", "-> 4/5!")."""
    first = _WORD.search(text)
    if first is None:
        return None
    for start in range(max(0, first.start() - 2), first.start() + 1):  # a sign or "." may precede the digit
        number = _number_at(text, start)
        if number is None:
            continue
        value, end = number
        denominator = None
        i = _skip(text, end, stars=False)
        if text.startswith("/", i):
            den = _number_at(text, _skip(text, i + 1, stars=False))
            if den is not None:
                denominator, end = den
        if _TRAILER.fullmatch(text, end):
            return value, denominator
    return None


def parse_raw_score(text: Any) -> Found | None:
    """``(value, denominator or None)`` of the score written in ``text``, or None."""
    if not isinstance(text, str):
        return None
    text = strip_think(text)
    for rule in (_json_score, labelled_score, boxed_score, fraction_score):
        found = rule(text)
        if found is not None:
            return found
    return bare_score(text.strip())
