"""Tool calls read from the model's text, in the format its chat template taught it.

Which format each supported architecture's template uses when given ``tools=`` (the templates
shipped with the families' instruct models; the tiny test models and SmolLM2 use a plain ChatML
template that does not render tools at all, so with them a tools prompt must come from the
system message):

=================  ===========================================================  ==========
architecture       tool-call format in the model's output                        ``fmt``
=================  ===========================================================  ==========
qwen2 (Qwen2.5)    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``   "hermes"
qwen3              the same (several blocks per turn)                            "hermes"
llama (3.1-3.3)    the whole message is ``{"name": ..., "parameters": {...}}``,  "llama3"
                   optionally after ``<|python_tag|>`` (the template writes
                   such a message from its call alone: the glue follows it)
mistral (v0.3+)    ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``;      "mistral"
                   newer templates ``[TOOL_CALLS]name[ARGS]{...}``
gemma3_text        the template ignores ``tools``; prompt for the Hermes form     "hermes"
                   (it raises on ``tool`` messages: results go back as ``user``)
phi3 (Phi-3/3.5)   the template ignores ``tools``; prompt for the Hermes form     "hermes"
                   (it drops ``tool`` messages: results go back as ``user``)
phi3 (Phi-4-mini)  ``functools[{"name": ..., "arguments": {...}}, ...]`` or       "phi4"
                   ``<|tool_call|>[...]<|/tool_call|>``; its template reads the
                   tools from the system message's ``tools`` key, not ``tools=``
=================  ===========================================================  ==========

``fmt="json"`` is polyrl's own form for templates without a tool format when the tools prompt
asks for it (``polyrl.agents.prompting``): the first call object ``{"name": ..., "arguments":
{...}}`` (``parameters`` accepted too) anywhere in the reply, prose around it kept as content.
Small models write this form far more readily than tagged ones.

How a tool's result reaches the model is decided per template at setup (``polyrl.agents.prompting``,
``EpisodeRunner.check_tool_results``): as ``tool`` messages, or, for a template that refuses or drops
them (Gemma 3, Phi-3), as one ``user`` message per turn with each result between
``<tool_response>`` tags.

A call object may also be wrapped as ``{"type": "function", "function": {"name", "arguments"}}``
(the OpenAI form some fine-tunes copy); it is unwrapped.

A turn that reasons first (``<think>...</think>``, Qwen3/DeepSeek-R1 style) is read for calls only
after its last ``</think>``, as the rewards read its answer (``polyrl.reasoning.final_part``): a
call the model only drafted while thinking is not run, and a turn whose ``<think>`` is still open
(cut off while reasoning) holds no call, nor does a turn without ``</think>`` whose prompt opened the
``<think>`` (``reasoning_open``: the chat template's generation prompt ends with it). Its
``content`` keeps the reasoning.

``fmt="auto"`` recognises each form by its markers (``polyrl.call_markers``). Markers that are
special tokens (``<|python_tag|>``, ``[TOOL_CALLS]``, ``[ARGS]``, Phi-4-mini's ``<|tool_call|>``)
stay in a completion's text: the backends' decoder keeps them (``completion_decoder``). Nothing
here raises on model output: a malformed call (bad JSON, no name, arguments that are not an object)
is an entry of ``errors`` that the episode shows to the model.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import attrs

from polyrl.agents.json_nested import Memo, record_object
from polyrl.agents.json_spans import object_ends
from polyrl.agents.tools import ToolCall, clean_text, quoted
from polyrl.call_markers import HERMES_CLOSE, HERMES_OPEN, MISTRAL_ARGS, MISTRAL_CALLS, PHI4_CLOSE, PHI4_OPEN, PYTHON_TAG
from polyrl.reasoning import final_part

FORMATS = ("auto", "hermes", "llama3", "mistral", "phi4", "json")

_HERMES = re.compile(rf"{re.escape(HERMES_OPEN)}(.*?)(?:{re.escape(HERMES_CLOSE)}|\Z)", re.DOTALL)
_PHI4_TAG = re.compile(rf"{re.escape(PHI4_OPEN)}(.*?)(?:{re.escape(PHI4_CLOSE)}|\Z)", re.DOTALL)
_FUNCTOOLS = "functools["
_OBJECT_START = re.compile(r'\{\s*"')  # a call object has a key first
_NAMED_START = re.compile(r'\{\s*"name"')
_MAX_SHOWN = 120  # characters of a malformed call quoted back to the model
MAX_DEPTH = 32  # nesting of a call's JSON; deeper is malformed (templates and checks recurse on it)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is past the largest number a tool can get")
    return value


def _unreadable(token: str) -> bool:
    """Whether ``_DECODER`` refuses a number token (a ValueError: ``_no_constant``, ``_finite``,
    or an integer past Python's digit limit)."""
    try:
        if token in ("NaN", "Infinity", "-Infinity"):
            _no_constant(token)
        elif any(c in token for c in ".eE"):
            _finite(token)
        else:
            int(token)
    except ValueError:
        return True
    return False


#: Python's decoder reads ``NaN``/``Infinity`` (not JSON) and ``1e400`` (JSON, but infinite as a
#: float): either would reach the tool as a non-finite "number" and the call's record, which
#: files write as ``null``; such a call is malformed instead.
#: Its objects are built by ``record_object`` (the dicts the decoder builds by default), so that a
#: ``Memo`` learns each nested object of a decode (``_json_call``).
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=record_object)


@attrs.define
class ParsedTurn:
    """An assistant turn split into its text and its tool calls (plus what could not be read)."""

    content: str
    calls: list[ToolCall] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    #: the text ends inside a call's tags (a ``<tool_call>`` with no ``</tool_call>``), read as a
    #: call all the same: where the turn was cut at its token budget, that is no call (the runner)
    unterminated: bool = False


#: an id the model wrote that a call keeps: 9 alphanumerics, what Mistral's templates demand (they
#: raise on any other, which ended the episode as the environment's error, unscored: a policy
#: writing ``"id": "call_1"`` was never trained against it, and every rollout so stopped the run).
#: Any other id is replaced by polyrl's own, in the call and its result alike.
_MODEL_ID = re.compile(r"[A-Za-z0-9]{9}")


def _unique_ids(turn: ParsedTurn) -> ParsedTurn:
    """``turn`` with each repeated call id replaced (a template pairs results with calls by id): by
    ``_call_id(n)``, the first ``n`` from the call's index on that no call of the turn has. Why a set
    and a cursor: asking every call for every ``n`` was quadratic in a turn of many repeated ids."""
    seen: set[str] = set()
    taken = {call.id for call in turn.calls}
    cursor = 0  # every n below it, from the last replaced call's index on, is taken
    for i, call in enumerate(turn.calls):
        if call.id in seen:
            n = max(i, cursor)
            while _call_id(n) in taken:
                n += 1
            turn.calls[i] = attrs.evolve(call, id=_call_id(n))
            taken.add(_call_id(n))
            cursor = n + 1
        seen.add(turn.calls[i].id)
    return turn


def _call_id(index: int) -> str:
    # Mistral's templates require 9 alphanumeric characters; unique within a turn is enough.
    return f"call{index:05d}"


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."


def _checked(obj: Any, text: str, start: int) -> Any:
    """A decoded call, its strings made renderable (``clean_text``); nesting past ``MAX_DEPTH``
    is unreadable (measured without recursion: the model chose the depth)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise _too_deep(text, start)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return _cleaned(obj)


def _too_deep(text: str, start: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", text, start)


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(k): _cleaned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    return value


def _raw_decode(text: str, start: int = 0, memo: Memo | None = None, offset: int = 0) -> tuple[Any, int]:
    """``json.JSONDecoder.raw_decode`` for model output: anything it cannot read, an integer past
    Python's digit limit (ValueError) or nesting past the recursion limit included, is a
    ``JSONDecodeError``, which every caller turns into an error the model reads. ``memo`` learns
    the decode's objects (``text`` lies at ``offset`` in its text)."""
    try:
        if memo is None:
            obj, end = _DECODER.raw_decode(text, start)
        else:
            obj, end = memo.decode(_DECODER.raw_decode, text, start, offset)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        raise json.JSONDecodeError(what, text, start) from None
    return _checked(obj, text, start), end


def _loads(raw: str) -> Any:
    """``json.loads`` for model output (see ``_raw_decode``): one value, whitespace around it."""
    start = len(raw) - len(raw.lstrip())
    obj, end = _raw_decode(raw, start)
    if raw[end:].strip():
        raise json.JSONDecodeError("Extra data", raw, end)
    return obj


def _decode_object(raw: str) -> tuple[Any, str | None]:
    try:
        return _loads(raw), None
    except json.JSONDecodeError as exc:
        return None, f"tool call is not valid JSON ({exc.msg} at column {exc.colno}): {_short(raw)}"


def _collect(call: ToolCall | None, error: str | None, calls: list[ToolCall], errors: list[str]) -> None:
    if call is not None:
        calls.append(call)
    else:
        errors.append(error or "malformed tool call")


def _to_call(obj: Any, index: int, raw: str, args_keys: tuple[str, ...]) -> tuple[ToolCall | None, str | None]:
    """A ``ToolCall`` from a decoded ``{"name", "arguments"|"parameters"}`` object, or the error."""
    if isinstance(obj, dict) and "name" not in obj and isinstance(obj.get("function"), dict):
        obj = {**obj["function"], **({"id": obj["id"]} if "id" in obj else {})}
    if not isinstance(obj, dict):
        return None, f"tool call must be a JSON object with \"name\" and \"arguments\": {_short(raw)}"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, f"tool call has no \"name\": {_short(raw)}"
    arguments: Any = {}
    for key in args_keys:
        if key in obj:
            arguments = obj[key]
            break
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        decoded, error = _decode_object(arguments) if arguments.strip() else ({}, None)
        if error:
            return None, f"arguments of tool call {quoted(name)} are a string that is not JSON: {_short(arguments)}"
        arguments = decoded
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, f"arguments of tool call {quoted(name)} must be a JSON object, got {_short(json.dumps(arguments))}"
    call_id = obj.get("id")
    return ToolCall(name=name.strip(), arguments=arguments,
                    id=call_id if isinstance(call_id, str) and _MODEL_ID.fullmatch(call_id) else _call_id(index)), None


def _hermes_spans(text: str) -> list[tuple[int, int, str, bool, tuple[Any, str | None]]]:
    """Each ``<tool_call>`` of ``text`` as (start, end, body, closed, its decode). A body is cut at
    the first ``</tool_call>``, unless so cut it is no JSON while one JSON value read from its start
    ends right before a later ``</tool_call>`` (or the text's end). Why: a call whose string
    argument holds the tag (code or docs that write ``</tool_call>``) was cut inside that string,
    and the model's well-formed call became a "not valid JSON" error."""
    spans: list[tuple[int, int, str, bool, tuple[Any, str | None]]] = []
    for match in _HERMES.finditer(text):
        if spans and match.start() < spans[-1][1]:
            continue  # inside the body of a call read past its first closing tag
        body, end = match.group(1), match.end()
        closed = match.group(0).endswith(HERMES_CLOSE)
        decoded = _decode_object(body)
        if closed and decoded[1] is not None:
            whole = _whole_body(text, match.start(1))
            if whole is not None:
                body, end, closed = whole
                decoded = _decode_object(body)
        spans.append((match.start(), end, body, closed, decoded))
    return spans


def _whole_body(text: str, begin: int) -> tuple[str, int, bool] | None:
    """The body of the call whose body starts at ``begin`` read as one JSON value to its end, the
    end of its ``</tool_call>`` and whether it has one; None unless only whitespace then follows
    before a ``</tool_call>`` or the text's end."""
    at = len(text) - len(text[begin:].lstrip())
    try:
        _, stop = _raw_decode(text, at)
    except json.JSONDecodeError:
        return None
    rest = text[stop:].lstrip()
    if rest.startswith(HERMES_CLOSE):
        close = len(text) - len(rest)
        return text[begin:close], close + len(HERMES_CLOSE), True
    return (text[begin:], len(text), False) if not rest else None


def _hermes(text: str) -> ParsedTurn:
    calls: list[ToolCall] = []
    errors: list[str] = []
    unterminated = False
    content: list[str] = []
    last = 0
    for i, (start, end, body, closed, (obj, error)) in enumerate(_hermes_spans(text)):
        content.append(text[last:start])
        last = end
        unterminated = unterminated or not closed  # only the last can be: the pattern ends it at \Z
        if error:
            errors.append(error if closed else f"unterminated <tool_call> (no </tool_call>): {_short(body)}")
            continue
        call, error = _to_call(obj, i, body, ("arguments", "parameters"))
        _collect(call, error, calls, errors)
    content.append(text[last:])
    return ParsedTurn("".join(content).strip(), calls, errors, unterminated)


def _llama3(text: str) -> ParsedTurn:
    stripped = text.strip()
    tagged = stripped.startswith(PYTHON_TAG)
    body = stripped[len(PYTHON_TAG):].strip() if tagged else stripped
    if not tagged and not body.startswith("{"):
        return ParsedTurn(text.strip())
    obj, error = _decode_object(body)
    if error:
        if not tagged:  # plain text that merely starts with "{": not a call attempt
            return ParsedTurn(text.strip())
        if not body.startswith("{"):
            error = f"only JSON tool calls {{\"name\": ..., \"parameters\": {{...}}}} are understood: {_short(body)}"
        return ParsedTurn("", [], [error])
    if not tagged and not (isinstance(obj, dict) and "name" in obj and ("parameters" in obj or "arguments" in obj)):
        return ParsedTurn(text.strip())  # a JSON answer, not a call
    call, error = _to_call(obj, 0, body, ("parameters", "arguments"))
    return ParsedTurn("", [call] if call else [], [] if call else [error or "malformed tool call"])


def _json_call(text: str) -> ParsedTurn:
    """The first call object in the reply (prose or a ```json fence around it is kept as content).

    A call object starts ``{"``; it is decoded only from a ``{`` whose balancing ``}`` is within
    ``MAX_DEPTH`` (``json_spans``: one pass), since no decode from another can succeed. Why: each
    decode reads on to where it fails, so decoding at every ``{`` was quadratic in a degenerate
    reply; and each failed decode counted the text's lines up to it (``json.JSONDecodeError``), so
    one is given only the text up to its span's end. The first ``{"name"`` that does not decode is
    decoded once all the same, for its error. An object inside one already decoded is taken from
    that decode, and one open where a decode failed is not decoded again (``json_nested``): each
    level of a valid object nested 30 deep was decoded anew, reading the text 30 times."""
    candidates = [m.start() for m in _OBJECT_START.finditer(text)]
    ends = object_ends(text, set(candidates), MAX_DEPTH)
    memo = Memo(text, _unreadable)
    broken: str | None = None
    for start in candidates:
        named = broken is None and _NAMED_START.match(text, start) is not None
        if start not in ends and not named:
            continue
        nested = memo.objects.get(start)
        if nested is not None:  # decoded already, inside an earlier candidate's object
            if nested.height > MAX_DEPTH:
                if named:
                    broken = _not_json(_too_deep(text, start), text[start:])
                continue
            if not _call_shaped(nested.value):
                continue
            obj, end = _cleaned(nested.value), nested.end
        elif start in memo.failing and not named:
            continue
        else:
            try:  # the span alone but for the error shown: a JSONDecodeError counts the lines before it
                if named:
                    obj, end = _raw_decode(text, start, memo)
                else:
                    obj, end = _raw_decode(text[start:ends[start] + 1], 0, memo, offset=start)
                    end += start
            except json.JSONDecodeError as exc:
                if named:
                    broken = _not_json(exc, text[start:])
                continue
        if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
            call, error = _to_call(obj, 0, text[start:end], ("arguments", "parameters"))
            content = (text[:start] + text[end:]).replace("```json", "").replace("```", "").strip()
            return ParsedTurn(content, [call] if call else [], [] if call else [error or "malformed tool call"])
    if broken is not None:
        return ParsedTurn(text.strip(), [], [broken])
    return ParsedTurn(text.strip())


def _not_json(exc: json.JSONDecodeError, raw: str) -> str:
    return f"tool call is not valid JSON ({exc.msg} at column {exc.colno}): {_short(raw)}"


def _call_shaped(value: dict[str, Any]) -> bool:
    """Whether ``value`` read as a call object (its keys as ``_cleaned`` writes them)."""
    keys = {clean_text(k) for k in value}
    return "name" in keys and ("arguments" in keys or "parameters" in keys)


def _mistral(text: str) -> ParsedTurn:
    head, _, rest = text.partition(MISTRAL_CALLS)
    calls: list[ToolCall] = []
    errors: list[str] = []
    chunks = [c for c in rest.split(MISTRAL_CALLS) if c.strip()]
    for chunk in chunks:
        chunk = chunk.strip()
        if chunk.startswith("["):  # [TOOL_CALLS][{...}, {...}]
            obj, error = _decode_object(chunk)
            if error:
                errors.append(error)
                continue
            if not isinstance(obj, list):
                obj = [obj]
            for item in obj:
                call, error = _to_call(item, len(calls) + len(errors), json.dumps(item), ("arguments", "parameters"))
                _collect(call, error, calls, errors)
        elif MISTRAL_ARGS in chunk:  # [TOOL_CALLS]name[ARGS]{...}
            name, _, raw = chunk.partition(MISTRAL_ARGS)
            args, error = _decode_object(raw)
            if error:
                errors.append(f"arguments of tool call {quoted(name.strip())}: {error}")
                continue
            call, error = _to_call({"name": name, "arguments": args}, len(calls) + len(errors), chunk, ("arguments",))
            _collect(call, error, calls, errors)
        else:
            obj, error = _decode_object(chunk)
            call, error2 = (None, error) if error else _to_call(obj, len(calls) + len(errors), chunk, ("arguments", "parameters"))
            (calls.append(call) if call else errors.append(error2 or "malformed tool call"))
    if not chunks:
        errors.append(f"{MISTRAL_CALLS} is followed by no call")
    return ParsedTurn(head.strip(), calls, errors)


def _calls_from_json(raw: str, calls: list[ToolCall], errors: list[str]) -> None:
    """Append the call(s) of one JSON object or list (text after it is ignored)."""
    try:
        obj, _ = _raw_decode(raw.strip())
    except json.JSONDecodeError as exc:
        errors.append(f"tool call is not valid JSON ({exc.msg} at column {exc.colno}): {_short(raw)}")
        return
    for item in obj if isinstance(obj, list) else [obj]:
        call, error = _to_call(item, len(calls) + len(errors), json.dumps(item), ("arguments", "parameters"))
        _collect(call, error, calls, errors)


def _phi4(text: str) -> ParsedTurn:
    """Phi-4-mini's calls. A ``<|tool_call|>`` block with no ``<|/tool_call|>`` is read all the
    same but ``unterminated``, as a Hermes one is: a turn cut at its budget inside it holds no call
    (its call was answered, the end marker the model never wrote inserted after it)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    content = text
    unterminated = False
    if _PHI4_TAG.search(text):
        for match in _PHI4_TAG.finditer(text):
            _calls_from_json(match.group(1), calls, errors)
            unterminated = not match.group(0).endswith(PHI4_CLOSE)  # only the last can be: \Z ends it
        content = _PHI4_TAG.sub("", text)
    elif _FUNCTOOLS in text:
        start = text.index(_FUNCTOOLS)
        content = text[:start]
        _calls_from_json(text[start + len(_FUNCTOOLS) - 1:], calls, errors)
    return ParsedTurn(content.strip(), calls, errors, unterminated)


def parse_tool_calls(text: str, fmt: str = "auto", reasoning_open: bool = False) -> ParsedTurn:
    """Split an assistant turn into its text and its tool calls, in ``fmt`` (see the table above).

    ``content`` is the text without the calls. Calls are read after the last ``</think>`` only
    (see the module docstring); ``reasoning_open``: the prompt opened the ``<think>``, so a turn
    without ``</think>`` is all reasoning. Never raises on model output; an unknown ``fmt`` is a
    programming error (ValueError).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool-call format {fmt!r}; known: {', '.join(FORMATS)}")
    answer = final_part(text, opened=reasoning_open)
    if answer is None:  # still reasoning: whatever it drafted is no call
        return ParsedTurn(text.strip())
    if len(answer) == len(text):
        return _unique_ids(_parse_answer(text, fmt))
    reasoning = text[: len(text) - len(answer)]  # up to and including the last </think>
    parsed = _parse_answer(answer, fmt)
    parsed.content = f"{reasoning.strip()}\n\n{parsed.content}".strip()
    return _unique_ids(parsed)


def _parse_answer(text: str, fmt: str) -> ParsedTurn:
    """``parse_tool_calls`` on a turn's answer (no reasoning left in it)."""
    if fmt == "hermes" or (fmt == "auto" and HERMES_OPEN in text):
        return _hermes(text)
    if fmt == "mistral" or (fmt == "auto" and MISTRAL_CALLS in text):
        return _mistral(text) if MISTRAL_CALLS in text else ParsedTurn(text.strip())
    if fmt == "phi4" or (fmt == "auto" and (PHI4_OPEN in text or _FUNCTOOLS in text)):
        return _phi4(text)
    if fmt == "json":
        return _json_call(text)
    if fmt in ("llama3", "auto"):
        return _llama3(text)
    return ParsedTurn(text.strip())  # pragma: no cover - every format is handled above
