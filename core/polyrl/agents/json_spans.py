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
"""

from __future__ import annotations

import re

_EVENTS = re.compile(r'[{}"\\]')
_OUT, _IN, _ESCAPED = 0, 1, 2


class _Reading:
    """One way of reading the text: its state, its brace depth, and the ``{`` still open in it
    (by the depth they close at; each list in text order)."""

    __slots__ = ("depth", "escaped_at", "open", "state")

    def __init__(self, state: int) -> None:
        self.state = state
        self.depth = 0
        self.escaped_at = -1
        self.open: dict[int, list[int]] = {}

    def absorb(self, other: _Reading) -> None:
        """Take ``other``'s open braces (it reads the rest of the text as this one does)."""
        shift = self.depth - other.depth
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
    ends: dict[int, int] = {}
    readings: list[_Reading] = []  # at most one per state
    for match in _EVENTS.finditer(text, min(starts, default=len(text))):
        at = match.start()
        char = text[at]
        if len(readings) == 1 and readings[0].state != _ESCAPED:  # the usual case: one reading
            reading = readings[0]
            if reading.state == _OUT or char != "{" or at not in starts:
                _step(reading, char, at, starts, limit, ends)
                if not reading.open:  # one with no brace left open can record nothing more
                    readings.clear()
                continue
        readings = _step_all(readings, char, at, starts, limit, ends)
    return ends


def _step_all(readings: list[_Reading], char: str, at: int, starts: set[int], limit: int,
              ends: dict[int, int]) -> list[_Reading]:
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
        by_state[_OUT] = _Reading(_OUT)
    moved = list(by_state.values())
    by_state.clear()
    for reading in moved:
        _step(reading, char, at, starts, limit, ends)
        if reading.open:  # one with no brace left open can record nothing more
            _put(by_state, reading)
    if skip is not None:
        skip.state = _IN
        _put(by_state, skip)
    return list(by_state.values())


def _step(reading: _Reading, char: str, at: int, starts: set[int], limit: int, ends: dict[int, int]) -> None:
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
