"""The one brace scanner behind ``fmt="json"`` call parsing (``polyrl.agents.json_spans``).

``object_ends`` (every candidate's span, all readings at once) and ``first_reading`` (the objects
a decode from one ``{`` closed, placed by ``json_nested.Memo``) are one scanner; ``Memo`` had a
second one of its own. ``first_reading`` is checked here against the plain single-reading scan
that second one did, on a generated corpus (the merge was checked so on 100,000 texts).
"""

from __future__ import annotations

import random
import re

from polyrl.agents.json_nested import Memo
from polyrl.agents.json_spans import first_reading, object_ends
from polyrl.agents.parsing import parse_tool_calls

_EVENTS = re.compile(r'[{}"\\]')
PIECES = ['{', '}', '"', '\\', '\\"', '\\\\', ':', ',', '[', ']', 'a', '1', ' ', '{"', '{"name": "f", "arguments": ',
          '{"a": ', '"x"', '}}', 'NaN', '{}', '\n', '"name"']


def reference(text: str, start: int, stop: int) -> tuple[list[tuple[int, int]], list[int]]:
    """One reading from the ``{`` at ``start``: strings skipped (a backslash escaping the next
    character), braces paired, until ``stop`` or the close of the object at ``start``."""
    closed: list[tuple[int, int]] = []
    opened: list[int] = []
    in_string, escaped_at = False, -1
    for match in _EVENTS.finditer(text, start, stop):
        at, char = match.start(), match.group()
        if in_string:
            if at == escaped_at:
                continue
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            opened.append(at)
        elif char == "}" and opened:
            closed.append((opened.pop(), at + 1))
            if not opened:
                break
    return closed, opened


def test_first_reading_equals_a_single_reading_scan_on_a_generated_corpus():
    rng = random.Random(0)
    checked = 0
    for _ in range(800):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30)))
        for start in [i for i, c in enumerate(text) if c == "{"][:4]:
            for stop in (len(text), rng.randint(start, len(text))):
                assert first_reading(text, start, stop) == reference(text, start, stop), (text, start, stop)
                checked += 1
    assert checked > 1500


def test_a_reading_merged_into_the_first_does_not_lend_it_later_starts():
    """Another reading (from a ``{`` inside the first's string) merges into the first one and keeps
    braces open past the first's own object; the ``{`` after that object is no object of its
    decode, and was reported still open."""
    text = 'NaN,1\\" {{"]{}{"a": \n\\\\{"a": name{"name"NaN\\"\\u00e9"{"name"}}{'
    closed, opened = first_reading(text, 9, len(text))
    assert closed == [(52, 60), (9, 61)] and opened == []
    assert (closed, opened) == reference(text, 9, len(text))


def test_first_reading_of_what_is_not_an_open_brace_is_empty():
    assert first_reading('{"a": 1}', 1, 8) == ([], [])
    assert first_reading('{"a": 1}', 0, 0) == ([], [])
    assert first_reading('{', 1, 5) == ([], []) and first_reading('{', 0, 5) == ([], [0])
    assert first_reading('{"a": {}}', 0, 9) == ([(6, 8), (0, 9)], [])


def test_object_ends_and_first_reading_agree_on_where_an_object_ends():
    text = '{"name": "f", "arguments": {"s": "}{\\"}"}} {"x": {'
    starts = {m.start() for m in re.finditer(r'\{\s*"', text)}
    ends = object_ends(text, starts, 32)
    closed, opened = first_reading(text, 0, len(text))
    assert closed[-1] == (0, ends[0] + 1) and opened == []
    assert first_reading(text, 43, len(text)) == ([], [43, 49])


def test_memo_learns_a_nested_call_and_the_objects_open_where_a_decode_failed():
    """End to end through ``Memo``: a valid call's inner objects are placed; a failed decode
    marks the objects open at the failure as failing."""
    import json

    from polyrl.agents.json_nested import record_object

    decoder = json.JSONDecoder(object_pairs_hook=record_object)
    text = 'x {"name": "f", "arguments": {"a": {"b": 1}}} {"name": "g", "arguments": {"c": [1, }'
    memo = Memo(text, lambda token: False)
    memo.decode(decoder.raw_decode, text, 2)
    assert sorted(memo.objects) == [2, 29, 35] and memo.objects[35].value == {"b": 1}
    assert memo.objects[2].end == text.index("} {") + 1
    start = text.index('{"name": "g"')
    try:
        memo.decode(decoder.raw_decode, text, start)
    except json.JSONDecodeError:
        pass
    assert memo.failing == {start, text.index('{"c"')}
    parsed = parse_tool_calls(text, fmt="json")
    assert [(c.name, c.arguments) for c in parsed.calls] == [("f", {"a": {"b": 1}})]
