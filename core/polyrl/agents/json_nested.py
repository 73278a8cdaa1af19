"""The objects one JSON decode built, by where each starts in the text, so none is decoded twice.

Why: ``fmt="json"`` decodes from each ``{"`` of a reply until one is a call, and a valid object
nested N deep holds N such starts one inside the other: each was decoded again, reading the text
N times over (32 times for the deepest a call may nest). One decode already builds every object
inside it: the decoder's ``object_pairs_hook`` hands each one over as it closes (innermost first),
and a scan of the decoded text that counts braces outside strings says where each starts (the
k-th ``}`` it meets closes the k-th object handed over: ``json_spans.first_reading``, the
scanner ``json_spans`` finds every call object's span with). A later start of such an object takes it
instead of decoding again. A decode that fails teaches as much: the objects it closed before
failing are whole, and an object still open where it failed fails there too when decoded on its
own (the decoder reads an object alike wherever it starts), unless what stopped it was Python's
recursion limit, which depends on where the decode started. Where it failed is the error's
position, or for a number the decoder read but refused (``NaN``, ``1e400``, an integer past
Python's digit limit: a ``ValueError`` without one) the first such number the scan meets.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

import attrs

from polyrl.agents.json_spans import first_reading

#: a number token as the decoder reads one outside strings (and the constants it hands its hook)
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|NaN|-?Infinity")
_LOCAL = threading.local()


def record_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` building the dict the decoder builds by default (the last value of a
    repeated key, at the key's first place), noted where a ``Memo`` is decoding on this thread."""
    obj = dict(pairs)
    built = getattr(_LOCAL, "built", None)
    if built is not None:
        built.append(obj)
    return obj


@attrs.frozen
class Nested:
    """An object a decode built: its value as decoded (strings not cleaned), where it ends (the
    index after its ``}``), and its height (containers on its deepest path, itself included)."""

    value: dict[str, Any]
    end: int
    height: int


class Memo:
    """What the decodes of one text learned: ``objects`` (start -> ``Nested``) and ``failing``
    (starts whose own decode fails: objects open where a decode failed)."""

    def __init__(self, text: str, unreadable: Callable[[str], bool]) -> None:
        self.text = text
        #: whether the decoder refuses a number token (raising ValueError)
        self.unreadable = unreadable
        self.objects: dict[int, Nested] = {}
        self.failing: set[int] = set()

    def decode(self, raw_decode: Callable[[str, int], tuple[Any, int]], text: str, start: int,
               offset: int = 0) -> tuple[Any, int]:
        """``raw_decode(text, start)``, learning from it; ``text`` is ``self.text[offset:]`` or a
        prefix of it (``offset``: where it lies in ``self.text``). Raises what the decode raises."""
        built: list[dict[str, Any]] = []
        read = offset + len(text)  # the decode reads no further
        previous = getattr(_LOCAL, "built", None)
        _LOCAL.built = built
        try:
            obj, end = raw_decode(text, start)
        except json.JSONDecodeError as exc:
            self._learn(offset + start, built, offset + exc.pos, read)
            raise
        except RecursionError:
            self._learn(offset + start, built, None, read)
            raise
        except ValueError:
            self._learn(offset + start, built, self._refused_number(offset + start), read)
            raise
        finally:
            _LOCAL.built = previous
        self._learn(offset + start, built, None, offset + end)
        return obj, end

    def _learn(self, start: int, built: list[dict[str, Any]], failed_at: int | None, stop: int) -> None:
        """Place the objects ``built`` (in the order they closed) by the reading from ``start``
        (``json_spans.first_reading``, up to ``stop`` where the decode read at most); with
        ``failed_at`` (a decode error's position) the objects still open there fail on their own."""
        closed, opened = first_reading(self.text, start, stop if failed_at is None else failed_at)
        if failed_at is None:
            closed = closed[:len(built)]
        if len(closed) < len(built) or (failed_at is not None and len(closed) != len(built)):
            return  # not the decoder's reading (never expected): learn nothing rather than something wrong
        heights: dict[int, int] = {}
        for value, (begin, end) in zip(built, closed):
            height = 1 + max((_height(v, heights) for v in value.values()), default=0)
            heights[id(value)] = height
            self.objects[begin] = Nested(value, end, height)
        if failed_at is not None:
            self.failing.update(opened)

    def _refused_number(self, start: int) -> int | None:
        """Where the first number the decoder refuses lies, reading from ``start`` (outside strings)."""
        text = self.text
        at, in_string = start, False
        while at < len(text):
            if in_string:
                at = _string_end(text, at)
                in_string = False
                continue
            quote = text.find('"', at)
            stop = len(text) if quote < 0 else quote
            for match in _NUMBER.finditer(text, at, stop):
                if self.unreadable(match.group()):
                    return match.start()
            at, in_string = stop + 1, True
        return None


def _string_end(text: str, at: int) -> int:
    """The index after the ``"`` that closes a string whose text starts at ``at``."""
    while True:
        quote = text.find('"', at)
        if quote < 0:
            return len(text)
        backslashes = 0
        while text[quote - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return quote + 1
        at = quote + 1


def _height(value: Any, heights: dict[int, int]) -> int:
    """Containers on ``value``'s deepest path (0 for a scalar); a dict's is in ``heights`` (it
    closed first), lists are walked (each belongs to one object, so each is walked once)."""
    if isinstance(value, dict):
        return heights.get(id(value), 0)
    if not isinstance(value, list):
        return 0
    best = 0
    stack = [(value, 1)]
    while stack:
        items, depth = stack.pop()
        best = max(best, depth)
        for item in items:
            if isinstance(item, list):
                stack.append((item, depth + 1))
            elif isinstance(item, dict):
                best = max(best, depth + heights.get(id(item), 0))
    return best
