"""Where a JSON object could end, for every ``{`` of a text, in one pass.

Why: ``fmt="json"`` looks for the first call object anywhere in a reply, so it tried a JSON decode
at every ``{``, and each decode read on to where it failed: a policy writing ``{"name": "f",
"arguments": `` over and over (or ``{{{{``, or valid objects nested thousands deep) made the
parse quadratic, seconds per turn on the trainer's thread. A JSON object starting at ``{`` can only
end at the ``}`` that balances it, counting braces outside strings (a string runs from an unescaped
``"`` to the next one; a backslash inside one escapes the next character): the decoder, while the
text is valid, reads it exactly so. A ``{`` with no such ``}``, or one whose braces nest deeper than
a call may (``limit``), cannot start a readable call, and is never decoded.

Which characters are inside a string depends on where the reading starts, so the pass follows every
reading at once: one per state (outside a string, inside one, just after a backslash inside one);
readings that reach the same state at the same character read the rest alike and are merged, so at
most three are followed, whatever the text.

``first_reading`` is the same pass asked of the one reading that starts at a given ``{`` (the one a
decode from there follows): which objects it closes, in the order it closes them, and which are
still open where it stops (``json_nested`` places the objects a decode built with it). One scanner
serves both, so the two cannot come to read the grammar differently.
"""

from __future__ import annotations

import re

_EVENTS = re.compile(r'[{}"\\]')
_OPEN = re.compile(r"\{")
_OUT, _IN, _ESCAPED = 0, 1, 2


class _Reading:
    """One way of reading the text: its state, its brace depth, and the ``{`` still open in it
    (by the depth they close at; each list in text order)."""

    __slots__ = ("depth", "escaped_at", "first", "open", "state")

    def __init__(self, state: int, first: bool = False) -> None:
        self.state = state
        self.depth = 0
        self.escaped_at = -1
        self.open: dict[int, list[int]] = {}
        #: whether this is (merged with) the reading from the scan's first start
        self.first = first

    def absorb(self, other: _Reading) -> None:
        """Take ``other``'s open braces (it reads the rest of the text as this one does)."""
        shift = self.depth - other.depth
        self.first = self.first or other.first
        for level, starts in other.open.items():
            mine = self.open.setdefault(level + shift, [])
            if len(mine) < len(starts):  # the longer list is kept: merging costs the shorter one
                mine, starts = starts, mine
                self.open[level + shift] = mine
            mine.extend(starts)


def object_ends(text: str, starts: set[int], limit: int) -> dict[int, int]:
    """For each ``{`` in ``starts``: the index of the ``}`` a JSON object starting there would end
    at, when there is one and the braces between nest at most ``limit`` deep (the ``{`` itself is
    depth 1); the others are absent (no decode from them can succeed). Linear in ``len(text)``."""
    return _scan(text, starts, limit, len(text), None)


def first_reading(text: str, start: int, stop: int) -> tuple[list[tuple[int, int]], list[int]]:
    """The objects the reading from the ``{`` at ``start`` (a decode from there) closes before
    ``stop``: ``(start, end)`` of each (``end`` the index after its ``}``) in the order their
    ``}`` come, and the ``{`` still open at ``stop`` in text order. Linear in ``stop - start``.
    No depth limit: one above any depth ``stop`` characters can reach."""
    if not (0 <= start < min(stop, len(text)) and text[start] == "{"):
        return [], []
    starts = {m.start() for m in _OPEN.finditer(text, start, stop)}
    mine: set[int] = set()  # the starts the first reading itself met outside strings
    ends = _scan(text, starts, 2 * stop + 2, stop, mine)
    if start in ends:  # a decode reads no further than its object's end; a reading merged into this
        mine = {at for at in mine if at < ends[start]}  # one may read on, recording later starts
    closed = sorted(((at, ends[at] + 1) for at in mine if at in ends), key=lambda pair: pair[1])
    return closed, sorted(at for at in mine if at not in ends)


def _scan(text: str, starts: set[int], limit: int, stop: int, mine: set[int] | None) -> dict[int, int]:
    """``object_ends`` over ``text[:stop]``; ``mine`` (when given) gets the starts met outside
    strings by the reading from ``min(starts)`` (see ``first_reading``)."""
    ends: dict[int, int] = {}
    readings: list[_Reading] = []  # at most one per state
    first = min(starts, default=len(text))
    for match in _EVENTS.finditer(text, first, max(stop, first)):
        at = match.start()
        char = text[at]
        if len(readings) == 1 and readings[0].state != _ESCAPED:  # the usual case: one reading
            reading = readings[0]
            if reading.state == _OUT or char != "{" or at not in starts:
                _step(reading, char, at, starts, limit, ends, mine)
                if not reading.open:  # one with no brace left open can record nothing more
                    readings.clear()
                continue
        readings = _step_all(readings, char, at, starts, limit, ends, mine, at == first)
    return ends


def _step_all(readings: list[_Reading], char: str, at: int, starts: set[int], limit: int,
              ends: dict[int, int], mine: set[int] | None = None, first: bool = False) -> list[_Reading]:
    """Every reading past the character at ``at``, merged by state (see the module docstring)."""
    by_state: dict[int, _Reading] = {}
    skip = None
    for reading in readings:
        if reading.state == _ESCAPED and reading.escaped_at == at - 1:  # this character is the escaped one
            skip = reading
            continue
        if reading.state == _ESCAPED:  # a plain character was escaped: back in the string before this one
            reading.state = _IN
        _put(by_state, reading)
    if char == "{" and at in starts and _OUT not in by_state:  # a reading that starts here
        by_state[_OUT] = _Reading(_OUT, first)
    moved = list(by_state.values())
    by_state.clear()
    for reading in moved:
        _step(reading, char, at, starts, limit, ends, mine)
        if reading.open:  # one with no brace left open can record nothing more
            _put(by_state, reading)
    if skip is not None:
        skip.state = _IN
        _put(by_state, skip)
    return list(by_state.values())


def _step(reading: _Reading, char: str, at: int, starts: set[int], limit: int, ends: dict[int, int],
          mine: set[int] | None = None) -> None:
    if reading.state == _IN:
        if char == '"':
            reading.state = _OUT
        elif char == "\\":
            reading.state, reading.escaped_at = _ESCAPED, at
        return
    if char == '"':
        reading.state = _IN
    elif char == "{":
        if at in starts:
            reading.open.setdefault(reading.depth, []).append(at)
            if mine is not None and reading.first:
                mine.add(at)
        reading.depth += 1
        reading.open.pop(reading.depth - limit - 1, None)  # nested past the limit: never readable
    elif char == "}":
        reading.depth -= 1
        for start in reading.open.pop(reading.depth, ()):
            ends[start] = at


def _put(by_state: dict[int, _Reading], reading: _Reading) -> None:
    if reading.state in by_state:
        by_state[reading.state].absorb(reading)
    else:
        by_state[reading.state] = reading
