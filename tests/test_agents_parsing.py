"""Reading tool calls out of model text in the Hermes/Qwen, Llama-3.x and Mistral forms: calls and
the remaining text come out right, and malformed output becomes an error entry, never an exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyrl.agents import ToolCall, parse_tool_calls


def test_hermes_several_calls_and_the_text_around_them():
    text = ('Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>\n'
            '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}</tool_call>')
    turn = parse_tool_calls(text)
    assert turn.content == "Let me compute."
    assert turn.calls == [ToolCall("calculator", {"expression": "2+3"}, "call00000"),
                          ToolCall("python", {"code": "print(1)"}, "call00001")]
    assert turn.errors == []
    assert parse_tool_calls(text, fmt="hermes") == turn


def test_hermes_accepts_parameters_and_a_call_cut_at_its_closing_tag():
    # a stop string "</tool_call>" leaves the closing tag out of the text
    turn = parse_tool_calls('<tool_call>{"name": "f", "parameters": {"a": 1}}')
    assert turn.calls == [ToolCall("f", {"a": 1}, "call00000")] and turn.errors == [] and turn.content == ""


@pytest.mark.faults
@pytest.mark.parametrize(("body", "words"), [
    ('{"name": "f", "arguments": {"a": 1}', "not valid JSON"),
    ('{"arguments": {"a": 1}}', 'has no "name"'),
    ('{"name": "", "arguments": {}}', 'has no "name"'),
    ('{"name": "f", "arguments": [1, 2]}', "arguments of tool call 'f' must be a JSON object"),
    ('{"name": "f", "arguments": "{oops"}', "arguments of tool call 'f' are a string that is not JSON"),
    ('["f", {"a": 1}]', "must be a JSON object"),
])
def test_hermes_malformed_calls_are_errors_and_good_ones_still_run(body, words):
    turn = parse_tool_calls(f'ok <tool_call>{body}</tool_call><tool_call>{{"name": "g"}}</tool_call>')
    assert turn.content == "ok"
    assert turn.calls == [ToolCall("g", {}, "call00001")]
    assert len(turn.errors) == 1 and words in turn.errors[0]


def test_hermes_unterminated_garbage_says_so():
    turn = parse_tool_calls("thinking <tool_call>{\"name\": \"f\", \"argu")
    assert turn.calls == [] and "unterminated <tool_call>" in turn.errors[0] and turn.content == "thinking"


def test_llama3_json_call_with_and_without_python_tag():
    call = ToolCall("get_weather", {"city": "Paris"}, "call00000")
    plain = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert parse_tool_calls(plain).calls == [call]
    assert parse_tool_calls("<|python_tag|>" + plain).calls == [call]
    assert parse_tool_calls(plain, fmt="llama3").content == ""


@pytest.mark.parametrize("text", ['{"answer": 42}', "{not json, just braces}", "The answer is 42.",
                                  '{"name": "Ada"}'])
def test_llama3_text_that_is_not_a_call_stays_text(text):
    turn = parse_tool_calls(text)
    assert (turn.content, turn.calls, turn.errors) == (text, [], [])


@pytest.mark.faults
def test_llama3_python_tag_with_something_else_is_an_error():
    turn = parse_tool_calls('<|python_tag|>brave_search.call(query="x")')
    assert turn.calls == [] and "only JSON tool calls" in turn.errors[0]
    turn = parse_tool_calls('<|python_tag|>{"name": "f", "parameters": ')
    assert turn.calls == [] and "not valid JSON" in turn.errors[0]


def test_mistral_list_form_keeps_ids_and_text_before():
    text = ('Sure. [TOOL_CALLS][{"name": "f", "arguments": {"a": 1}, "id": "abc123XYZ"}, '
            '{"name": "g", "arguments": {}}]')
    turn = parse_tool_calls(text)
    assert turn.content == "Sure."
    assert turn.calls == [ToolCall("f", {"a": 1}, "abc123XYZ"), ToolCall("g", {}, "call00001")]
    assert all(len(c.id) == 9 and c.id.isalnum() for c in turn.calls)  # what Mistral templates demand


def test_mistral_args_form_several_calls():
    turn = parse_tool_calls('[TOOL_CALLS]f[ARGS]{"a": 1}[TOOL_CALLS]g[ARGS]{"b": [2]}', fmt="mistral")
    assert turn.calls == [ToolCall("f", {"a": 1}, "call00000"), ToolCall("g", {"b": [2]}, "call00001")]


@pytest.mark.faults
@pytest.mark.parametrize(("text", "words"), [
    ("[TOOL_CALLS]", "followed by no call"),
    ('[TOOL_CALLS][{"name": "f", "arguments": {]', "not valid JSON"),
    ('[TOOL_CALLS]f[ARGS]{"a": ', "arguments of tool call 'f'"),
    ('[TOOL_CALLS][{"arguments": {}}]', 'has no "name"'),
])
def test_mistral_malformed_calls_are_errors(text, words):
    turn = parse_tool_calls(text)
    assert turn.calls == [] and words in turn.errors[0]


def test_a_forced_format_ignores_the_others_markers():
    text = '{"name": "f", "parameters": {}}'
    assert parse_tool_calls(text, fmt="hermes").calls == []
    assert parse_tool_calls(text, fmt="mistral").content == text


def test_unknown_format_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown tool-call format 'xml'"):
        parse_tool_calls("x", fmt="xml")


_PIECES = st.sampled_from(["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "functools[",
                           "<|tool_call|>", "<|/tool_call|>", "{", "}",
                           "[", "]", '"name"', ":", '"arguments"', ",", '"f"', "1", " ", "\n", "null", '"'])


@pytest.mark.faults
@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES | st.text(max_size=5), max_size=30), st.sampled_from(["auto", "hermes", "llama3", "mistral", "phi4"]))
def test_parsing_never_raises_on_any_model_output(pieces, fmt):
    turn = parse_tool_calls("".join(pieces), fmt=fmt)
    assert all(isinstance(c.arguments, dict) and c.name for c in turn.calls)
    assert all(isinstance(e, str) and e for e in turn.errors)
    json.dumps([c.as_message_entry() for c in turn.calls])  # every call can go back into a template


def test_phi4_mini_functools_and_tag_forms():
    expected = [ToolCall("f", {"a": 1}, "call00000"), ToolCall("g", {"b": 2}, "call00001")]
    assert parse_tool_calls('Sure: functools[{"name": "f", "arguments": {"a": 1}}, '
                            '{"name": "g", "parameters": {"b": 2}}]').calls == expected
    turn = parse_tool_calls('<|tool_call|>[{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}, '
                            '{"name": "g", "arguments": {"b": 2}}]<|/tool_call|> done')
    assert (turn.calls, turn.content, turn.errors) == (expected, "done", [])
    turn = parse_tool_calls('functools[{"name": "f", "arguments": ', fmt="phi4")
    assert turn.calls == [] and "not valid JSON" in turn.errors[0]



@pytest.mark.parametrize("fmt", ["phi4", "auto"])
def test_a_phi4_tag_without_its_close_is_unterminated_as_a_hermes_one_is(fmt):
    """A turn cut at its budget inside ``<|tool_call|>`` (its JSON whole, ``<|/tool_call|>`` not
    written) read as a finished call: the runner answered it and inserted the end-of-turn marker
    the model never wrote, where a Hermes call so cut is none. Now it is ``unterminated`` too."""
    body = '[{"name": "f", "arguments": {"a": 1}}]'
    turn = parse_tool_calls(f"<|tool_call|>{body}", fmt=fmt)
    assert turn.calls == [ToolCall("f", {"a": 1}, "call00000")] and turn.unterminated
    closed = parse_tool_calls(f"<|tool_call|>{body}<|/tool_call|> <|tool_call|>{body}<|/tool_call|>", fmt=fmt)
    assert len(closed.calls) == 2 and not closed.unterminated
    assert parse_tool_calls(f"<|tool_call|>{body}<|/tool_call|> <|tool_call|>{body}", fmt=fmt).unterminated
    assert not parse_tool_calls(f"functools{body}", fmt=fmt).unterminated  # no tag to close

# --- hostile call bodies: deep nesting, huge integers, lone surrogates ------------------------------

#: How each format wraps one call object (the JSON form also as a bare reply).
_WRAP = {
    "hermes": lambda body: f"<tool_call>{body}</tool_call>",
    "auto": lambda body: f"<tool_call>{body}</tool_call>",
    "llama3": lambda body: f"<|python_tag|>{body}",
    "mistral": lambda body: f"[TOOL_CALLS][{body}]",
    "phi4": lambda body: f"functools[{body}]",
    "json": lambda body: body,
}


def _hostile_bodies(depth: int, digits: int) -> list[str]:
    deep_list = "[" * depth + "]" * depth
    deep_object = '{"a": ' * depth + "1" + "}" * depth
    return [
        '{"name": "calculator", "arguments": ' + "[" * depth,  # unterminated, as the sweep found it
        '{"name": "calculator", "arguments": {"x": ' + deep_list + "}}",
        '{"name": "calculator", "arguments": ' + deep_object + "}",
        '{"name": "calculator", "arguments": {"expression": ' + "9" * digits + "}}",
        '{"name": "calculator", "arguments": "{\\"x\\": ' + "9" * digits + '}"}',  # arguments as a JSON string
    ]


@pytest.mark.faults
@pytest.mark.parametrize("fmt", sorted(_WRAP))
def test_deep_nesting_and_huge_integers_are_malformed_calls_in_every_format(fmt):
    for body in _hostile_bodies(5000, 4400):
        turn = parse_tool_calls(_WRAP[fmt](body), fmt=fmt)
        assert turn.calls == [], (fmt, body[:60])
        assert len(turn.errors) == 1 and turn.errors[0], (fmt, body[:60])
        if fmt == "mistral":  # its list form is re-serialised per item: bounded as well
            assert all(len(e) < 400 for e in turn.errors)


@pytest.mark.faults
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3000), st.integers(1, 6000), st.sampled_from(sorted(_WRAP)), st.sampled_from(["", "Sure. "]))
def test_parsing_never_raises_on_any_depth_or_integer_size(depth, digits, fmt, prefix):
    for body in _hostile_bodies(depth, digits):
        turn = parse_tool_calls(prefix + _WRAP[fmt](body), fmt=fmt)
        for call in turn.calls:  # a call that was read is shallow and renders back to JSON
            json.dumps(call.as_message_entry())
        assert all(isinstance(e, str) and e for e in turn.errors)


@pytest.mark.faults
@pytest.mark.parametrize("fmt", sorted(_WRAP))
def test_lone_surrogate_escapes_in_a_call_become_replacement_characters(fmt):
    body = '{"name": "echo\\ud800", "arguments": {"x\\udfff": "a\\ud800b", "y": ["\\udc00"]}, "id": "c\\ud801"}'
    turn = parse_tool_calls(_WRAP[fmt](body), fmt=fmt)
    assert len(turn.calls) == 1
    call = turn.calls[0]
    assert call.name == "echo\ufffd" and call.arguments == {"x\ufffd": "a\ufffdb", "y": ["\ufffd"]}
    json.dumps(call.as_message_entry(), ensure_ascii=False).encode("utf-8")  # a tokenizer can take it


def test_a_malformed_calls_error_quotes_its_name_in_bounded_length():
    """The name of a call whose arguments were unreadable was echoed whole into the error."""
    name = "n" * 20000
    for text in (f'<tool_call>{{"name": "{name}", "arguments": "not json"}}</tool_call>',
                 f'<tool_call>{{"name": "{name}", "arguments": [1]}}</tool_call>'):
        [error] = parse_tool_calls(text).errors
        assert len(error) < 400 and "(20000 characters)" in error


@pytest.mark.parametrize("number, words", [("NaN", "NaN is not a JSON number"), ("-Infinity", "-Infinity is not"),
                                           ("1e400", "1e400 is past the largest number")])
def test_a_call_with_a_non_finite_number_is_malformed(number, words):
    """Python's json reads NaN/Infinity (not JSON) and 1e400 (infinite as a float): the tool got a
    non-finite "number" and the call's record held one, which files write as null."""
    parsed = parse_tool_calls(f'<tool_call>{{"name": "scale", "arguments": {{"x": {number}}}}}</tool_call>')
    assert parsed.calls == [] and len(parsed.errors) == 1 and words in parsed.errors[0]
    parsed = parse_tool_calls('{"name": "scale", "arguments": {"x": 1.5e3}}', fmt="json")
    assert parsed.calls[0].arguments == {"x": 1500.0}


def test_a_call_keeps_only_an_id_its_template_can_render_and_ids_stay_unique():
    """Any non-empty id the model wrote was kept: Mistral's templates raise on an id other than 9
    alphanumerics (the episode ended as an environment error), and two calls with one id could
    not be told apart by their results."""
    turn = parse_tool_calls('[TOOL_CALLS][{"name": "f", "arguments": {}, "id": "call_1"}, '
                            '{"name": "g", "arguments": {}, "id": "' + "i" * 20000 + '"}, '
                            '{"name": "h", "arguments": {}, "id": "abc123XYZ"}, '
                            '{"name": "k", "arguments": {}, "id": "abc123XYZ"}]')
    ids = [c.id for c in turn.calls]
    assert ids[:3] == ["call00000", "call00001", "abc123XYZ"] and len(set(ids)) == 4
    assert all(len(i) == 9 and i.isalnum() for i in ids)


class _CountingDecoder:
    """The parser's own JSON decoder, counting its decodes and the characters each read: to where it
    ended, or for a failure from the text's start to where it failed (its error counts the lines
    before it; one without a position counts the whole text): the work a reply costs, measured
    without a clock."""

    def __init__(self, decoder):
        self.decoder, self.calls, self.read = decoder, 0, 0

    def raw_decode(self, text, start=0):
        self.calls += 1
        try:
            obj, end = self.decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:  # which counts the lines of the text up to its position
            self.read += exc.pos + 1
            raise
        except (ValueError, RecursionError):
            self.read += len(text) - start
            raise
        self.read += end - start
        return obj, end


@pytest.mark.faults
@pytest.mark.parametrize("text, decodes", [
    ('{"name": "calc", "arguments": ' * 400, 1),  # each "{" opens an object that never ends
    ('{"a": ' * 2000 + "1" + "}" * 2000, 1),  # valid, nested far past what a call may be: its last 32 levels, once
    ('{"' + '\\"{' * 4000, 0),  # every "{" inside a string as read from the ones before it
    ('{"x": "{\\"y\\": ' * 1000, 0),
    ('{"a": 1, } ' * 2000, 2000),  # each a short object that fails: its error counted every line before it
])
def test_the_json_format_decodes_a_degenerate_reply_in_linear_work(monkeypatch, text, decodes):
    """fmt="json" decoded from every "{", each decode reading on to where it failed: quadratic (a
    60k-character reply repeating '{"name": "calc", "arguments": ' took seconds per turn on the
    trainer's thread). Now only from a "{" whose balancing "}" is near enough, plus once for the
    first broken '{"name"' (its error); what is parsed is unchanged."""
    import polyrl.agents.parsing as parsing

    counting = _CountingDecoder(parsing._DECODER)
    monkeypatch.setattr(parsing, "_DECODER", counting)
    turn = parse_tool_calls(text, fmt="json")
    assert turn.calls == [] and counting.calls <= decodes + 1 and counting.read <= 2 * len(text)
    good = text + ' then {"name": "f", "arguments": {"a": [1, {"b": 2}]}}'
    assert parse_tool_calls(good, fmt="json").calls == [ToolCall("f", {"a": [1, {"b": 2}]}, "call00000")]


_LONG = "x" * 3000


@pytest.mark.faults
@pytest.mark.parametrize("inner, calls", [
    (f'"{_LONG}"', []),  # valid objects nested 30 deep, none a call
    (f'{{"name": "f", "arguments": {{"s": "{_LONG}"}}}}', [ToolCall("f", {"s": _LONG}, "call00000")]),  # the innermost is
    (f'"{_LONG}", ', []),  # each level fails where the innermost does (a trailing comma)
    (f'[{{"b": "{_LONG}"}}, {{"c": 1e400}}]', []),  # each level fails at a number that is no tool's
])
def test_the_json_format_decodes_objects_nested_30_deep_once(monkeypatch, inner, calls):
    """Each ``{"`` of 30 nested objects was decoded anew, every decode reading the levels inside
    it: the text read 30 times (a call at the bottom was found after reading it 31 times). Now the
    objects one decode built are taken from it, and one open where a decode failed is not decoded
    again; what is parsed is unchanged."""
    import polyrl.agents.parsing as parsing

    text = '{"a": ' * 30 + inner + "}" * 30
    counting = _CountingDecoder(parsing._DECODER)
    monkeypatch.setattr(parsing, "_DECODER", counting)
    turn = parse_tool_calls(text, fmt="json")
    assert turn.calls == calls and turn.errors == []
    assert turn.content == ('{"a": ' * 30 + "}" * 30 if calls else text)
    assert counting.calls <= 2 and counting.read <= 2 * len(text), (counting.calls, counting.read, len(text))


def test_the_json_format_still_reads_the_first_call_among_braces_and_strings():
    """What the one-pass span finder must not change: a "{" quoted in prose, objects that are
    not calls, a call whose strings hold braces and escaped quotes, and the first broken call's
    error when no call is readable."""
    text = ('Use "{" like {"a": 1} or {}; {"name": "f", "arguments": {"s": "}{\\"}", "t": "\\\\"}} '
            'and {"name": "g", "arguments": {}}')
    turn = parse_tool_calls(text, fmt="json")
    assert turn.calls == [ToolCall("f", {"s": '}{"}', "t": "\\"}, "call00000")]
    assert turn.content == 'Use "{" like {"a": 1} or {};  and {"name": "g", "arguments": {}}'
    turn = parse_tool_calls('x {"name": "f", "arguments": {"a": } y {"name": "g", "arguments": [', fmt="json")
    assert turn.calls == [] and len(turn.errors) == 1
    assert turn.errors[0].startswith("tool call is not valid JSON (Expecting value at column 36)")


@pytest.mark.faults
def test_many_calls_with_one_id_are_renamed_in_linear_work(monkeypatch):
    """Each repeated id asked every call of the turn about every candidate id: quadratic in the
    calls of a turn (1000 calls with one id took seconds)."""
    import polyrl.agents.parsing as parsing

    made: list[int] = []
    call_id = parsing._call_id
    monkeypatch.setattr(parsing, "_call_id", lambda n: made.append(n) or call_id(n))
    text = '<tool_call>{"name": "f", "arguments": {}, "id": "abcdefghi"}</tool_call>' * 300
    ids = [c.id for c in parse_tool_calls(text).calls]
    assert ids == ["abcdefghi"] + [call_id(n) for n in range(1, 300)] and len(made) <= 4 * 300


def test_hermes_a_closing_tag_inside_a_json_string_argument_does_not_cut_the_call():
    """A call whose string argument holds ``</tool_call>`` (code or docs about the format) was cut at
    that tag inside the string: the model's well-formed call became a "not valid JSON" error and
    the string's tail leaked into the content. The call now reads to the tag that closes it."""
    code = 'print("<tool_call>{}</tool_call>")'
    text = ('Writing it.\n<tool_call>\n' + json.dumps({"name": "python", "arguments": {"code": code}})
            + '\n</tool_call>\nthen <tool_call>{"name": "g", "arguments": {}}</tool_call> done')
    turn = parse_tool_calls(text)
    assert turn.errors == [] and turn.content == "Writing it.\n\nthen  done"
    assert turn.calls == [ToolCall("python", {"code": code}, "call00000"), ToolCall("g", {}, "call00001")]
    assert parse_tool_calls(text, fmt="hermes") == turn
    # the closing tag cut off by a stop string: the call is whole, read as unterminated as before
    cut = parse_tool_calls('<tool_call>{"name": "f", "arguments": {"s": "</tool_call>"}}')
    assert cut.calls == [ToolCall("f", {"s": "</tool_call>"}, "call00000")] and cut.unterminated
    # a body that is no JSON read whole either keeps the first tag's cut and its error
    bad = parse_tool_calls('<tool_call>{"name": "f", "arguments": {"s": "</tool_call>" oops</tool_call> tail')
    assert bad.calls == [] and "not valid JSON" in bad.errors[0] and bad.content.endswith("oops</tool_call> tail")
