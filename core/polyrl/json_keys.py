"""JSON data rows whose objects name a key twice: refused, naming the key and where it is.

Why: ``{"answer": 1, "answer": 2}`` has no one meaning. Python's ``json`` keeps the last value;
🤗 datasets refuses a JSONL file with it at the top level of a row, keeps the last in a ``.json``
array, and read a nested ``{"k": 1, "k": 2}`` as the bare value ``2`` (the object gone). polyrl,
which types rows as datasets does, either guessed with a warning or passed that on silently.
"""

from __future__ import annotations

import json
from typing import Any


class RepeatedKey(Exception):
    """An object in the parsed text names ``key`` more than once (not a ValueError: those are
    ``json``'s own decode and digit-limit errors)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, or ``RepeatedKey`` for the first key named twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKey(key)
            seen.add(key)
    return obj


#: ``json.loads`` that refuses a repeated key (costs about a quarter more than plain parsing).
_DECODER = json.JSONDecoder(object_pairs_hook=_unique)
loads = _DECODER.decode


def repeated_in_array(text: str) -> tuple[int, int] | None:
    """(0-based row, 1-based line where it starts) of the first element of the JSON array ``text``
    that repeats a key; None when none does. Called only once the array is known to hold one, so
    the element-by-element parse is paid on the error path alone."""
    start = text.index("[") + 1
    row = 0
    while True:
        while start < len(text) and text[start] in " \t\r\n,":
            start += 1
        if start >= len(text) or text[start] == "]":
            return None
        try:
            start = _DECODER.raw_decode(text, start)[1]
        except RepeatedKey:
            return row, text.count("\n", 0, start) + 1
        row += 1
