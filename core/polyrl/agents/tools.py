"""Tools the model can call: JSON schemas from plain functions, and a box that runs calls safely.

``tool_schema(fn)`` gives the form transformers' ``apply_chat_template(tools=...)`` expects (the
same result as ``transformers.utils.get_json_schema``, wrapped in ``{"type": "function"}``; the
core must not import transformers, so it is rebuilt here from type hints and a Google-style
docstring).

``ToolBox.run(calls)`` answers every call with one ``tool`` message and never raises: an unknown
tool, arguments that do not fit the schema, a tool that raises (``sys.exit``/``os._exit``/
``KeyboardInterrupt``/``CancelledError`` included), one past its timeout, or a result that is
neither text nor JSON each become an ``error: ...`` text the model reads on its next turn. The
run goes on. Only the caller's own cancellation (a Ctrl-C of the run) leaves ``run``, at once.

Where a tool runs: never on the caller's thread or loop. A plain function runs on a daemon thread
of its own per call, an ``async def`` on such a thread's own event loop (``threads.Worker``); an
environment's own tools (``extended(..., worker=...)``) on that episode's worker, the thread and
loop its ``reset`` and ``step`` run on, one call at a time, so state tied to either (an sqlite
connection, an async client) works in its tools too. A tool gets its own deep copy of the call's
arguments: editing them cannot change the call recorded in the episode.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import inspect
import json
import re
import types
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import attrs
import numpy as np

from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.agents.threads import (MAX_ABANDONED, CallRaised, CallTimedOut, LateCalls, Worker, call_in_thread,
                                   describe, described, finished, raised_text)

log = get_logger("polyrl.agents.tools")

FIELD = "environment.tools"

# --- schemas ---------------------------------------------------------------------------------------

_BASIC: dict[Any, dict[str, Any]] = {
    int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"},
    bool: {"type": "boolean"}, type(None): {"type": "null"}, Any: {},
}
_SECTION = re.compile(r"^\s*(Args|Arguments|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\s*)(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)


def _yields(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` (or what it wraps, ``functools.wraps``: a registered tool under another name)
    is a generator function, sync or async."""
    try:
        inner = inspect.unwrap(fn)
    except ValueError:  # a cycle of __wrapped__
        inner = fn
    return any(inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f) for f in (fn, inner))


def _bad_tool(fn_name: str, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"tool {fn_name!r}: {problem}", field=FIELD, fix=fix)


def _type_schema(hint: Any, fn_name: str, param: str) -> dict[str, Any]:
    origin, args = get_origin(hint), get_args(hint)
    if origin is None:
        if hint in _BASIC:
            return dict(_BASIC[hint])
        if hint in (list, tuple):
            return {"type": "array"}
        if hint is dict:
            return {"type": "object"}
        raise _bad_tool(fn_name, f"argument {param!r} has type {hint!r}, which JSON cannot carry",
                        "use str, int, float, bool, list[...], dict[str, ...], Literal[...] or Optional[...]")
    if origin is Union or origin is types.UnionType:
        subtypes = [_type_schema(t, fn_name, param) for t in args if t is not type(None)]
        if len(subtypes) == 1:
            out = subtypes[0]
        elif all(isinstance(s.get("type"), str) for s in subtypes):
            out = {"type": sorted(s["type"] for s in subtypes)}
        else:
            out = {"anyOf": subtypes}
        if type(None) in args:
            out["nullable"] = True
        return out
    if origin is Literal:
        kinds: list[str] = []
        for value in args:
            kind = _BASIC.get(type(value), {}).get("type")
            if kind is None:
                raise _bad_tool(fn_name, f"Literal of argument {param!r} holds {value!r}",
                                "use only str, int, float, bool or None literals")
            if kind not in kinds:
                kinds.append(kind)
        return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0], fn_name, param)} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or ... in args:
            raise _bad_tool(fn_name, f"argument {param!r} is a {hint!r}", "use list[...] for a variable length")
        return {"type": "array", "prefixItems": [_type_schema(t, fn_name, param) for t in args]}
    if origin is dict:
        out = {"type": "object"}
        if len(args) == 2:
            out["additionalProperties"] = _type_schema(args[1], fn_name, param)
        return out
    raise _bad_tool(fn_name, f"argument {param!r} has type {hint!r}, which JSON cannot carry",
                    "use str, int, float, bool, list[...], dict[str, ...], Literal[...] or Optional[...]")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str], str | None]:
    """(description, {argument: description}, returns) of a Google-style docstring."""
    description: list[str] = []
    params: dict[str, list[str]] = {}
    returns: list[str] = []
    section, current, base_indent = "", None, None
    for line in doc.splitlines():
        head = _SECTION.match(line)
        if head:
            section, current, base_indent = head.group(1).lower(), None, None
            continue
        if not section:
            description.append(line)
        elif section in ("args", "arguments"):
            arg = _ARG_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            if arg and (base_indent is None or indent <= base_indent):
                base_indent = indent
                current = arg.group(2).lstrip("*")
                params[current] = [arg.group(3)]
            elif current is not None and line.strip():
                params[current].append(line.strip())
        elif section == "returns":
            returns.append(line.strip())
    text = lambda lines: " ".join(part.strip() for part in lines if part.strip())  # noqa: E731
    return ("\n".join(description).strip(), {k: text(v) for k, v in params.items()},
            text(returns) or None)


def tool_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """``{"type": "function", "function": {"name", "description", "parameters"}}`` for ``fn``.

    Every argument needs a type hint and a line under ``Args:`` in the docstring: the model only
    knows what a tool does from them. ``(choices: [...])`` ending an argument's line becomes its
    ``enum``. Raises ``ConfigError`` (field ``environment.tools``) naming what is missing.
    """
    fn_name = name or getattr(fn, "__name__", None) or type(fn).__name__
    if _yields(fn):
        raise _bad_tool(fn_name, "is a generator function (its body has a yield), so calling it runs none of "
                                 "its code and every call would answer an error", "return the result, not yield it")
    doc = inspect.getdoc(fn)
    if not doc:
        raise _bad_tool(fn_name, "has no docstring", "describe what it does and each argument under Args:")
    try:
        hints = get_type_hints(fn)
    except Exception as exc:  # noqa: BLE001 - an unresolvable annotation
        raise _bad_tool(fn_name, f"its type hints cannot be resolved ({exc})", "import the types it names") from exc
    try:
        signature = inspect.signature(fn)
    except (ValueError, TypeError) as exc:  # a builtin without one (max): was a traceback, not this error
        raise _bad_tool(fn_name, f"its signature cannot be read ({exc})",
                        "wrap it in a def with named, annotated arguments") from None
    description, arg_docs, returns_doc = _parse_docstring(doc)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for i, (pname, param) in enumerate(signature.parameters.items()):
        if i == 0 and pname in ("self", "cls") and param.annotation is inspect.Parameter.empty:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise _bad_tool(fn_name, f"argument {pname!r} is {param.kind.description}",
                            "give the tool plain named arguments (the model calls it with a JSON object)")
        if pname not in hints:
            raise _bad_tool(fn_name, f"argument {pname!r} has no type hint", f"annotate it, e.g. {pname}: str")
        if pname not in arg_docs:
            raise _bad_tool(fn_name, f"the docstring does not describe argument {pname!r}",
                            f"add a line '{pname}: what it is' under Args:")
        schema = _type_schema(hints[pname], fn_name, pname)
        text = arg_docs[pname]
        choices = _CHOICES.search(text)
        if choices:
            try:
                schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            except ValueError as exc:
                raise _bad_tool(fn_name, f"the choices of argument {pname!r} are not a JSON list",
                                'write (choices: ["a", "b"])') from exc
            text = text[: choices.start()].strip()
        schema["description"] = text
        properties[pname] = schema
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    function: dict[str, Any] = {"name": fn_name, "description": description, "parameters": parameters}
    if "return" in hints:
        ret = _type_schema(hints["return"], fn_name, "return")
        if returns_doc is not None:
            ret["description"] = returns_doc
        function["return"] = ret
    return {"type": "function", "function": function}


# --- argument checking -----------------------------------------------------------------------------

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


#: characters of a name the model wrote (a tool's, an argument's, a key's) quoted in an error
MAX_QUOTED = 120


def quoted(text: str) -> str:
    """``repr`` of a name the model wrote, cut at ``MAX_QUOTED`` characters. Why: errors echoed the
    whole of it, so a 20,000-character tool name came back as 20,000 tokens of error (or ended the
    episode as ``length`` where a short error fitted)."""
    return repr(text) if len(text) <= MAX_QUOTED else f"{text[:MAX_QUOTED]!r}... ({len(text)} characters)"


def _json_type(value: Any) -> str:
    for kind in ("boolean", "integer", "number", "string", "null", "array", "object"):
        if _JSON_TYPES[kind](value):
            return kind
    return type(value).__name__


def value_problem(schema: Mapping[str, Any], value: Any, where: str) -> str | None:
    """Why ``value`` does not fit ``schema`` (the subset ``tool_schema`` writes), or None."""
    if value is None and schema.get("nullable"):
        return None
    if "anyOf" in schema:
        if all(value_problem(s, value, where) for s in schema["anyOf"]):
            return f"{where} must be one of {[s.get('type', 'any') for s in schema['anyOf']]}, got {_json_type(value)}"
        return None
    kind = schema.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        if not any(_JSON_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return f"{where} must be {' or '.join(kinds)}, got {_json_type(value)} {value!r:.60}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {schema['enum']}, got {value!r:.60}"
    if isinstance(value, list):
        if "prefixItems" in schema:
            items = schema["prefixItems"]
            if len(value) != len(items):
                return f"{where} must have {len(items)} items, got {len(value)}"
            for i, (s, v) in enumerate(zip(items, value)):
                if problem := value_problem(s, v, f"{where}[{i}]"):
                    return problem
        elif "items" in schema:
            for i, v in enumerate(value):
                if problem := value_problem(schema["items"], v, f"{where}[{i}]"):
                    return problem
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), Mapping):
        for k, v in value.items():
            if problem := value_problem(schema["additionalProperties"], v, f"{where}[{quoted(k)}]"):
                return problem
    return None


def arguments_problem(parameters: Mapping[str, Any], arguments: Any) -> str | None:
    """Why ``arguments`` (a call's JSON object) do not fit a tool's ``parameters``, or None."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {_json_type(arguments)}"
    props = parameters.get("properties", {})
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        shown = ", ".join(quoted(u) for u in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        return f"unexpected argument(s) {shown} (it takes: {', '.join(props) or 'none'})"
    missing = [p for p in parameters.get("required", []) if p not in arguments]
    if missing:
        return f"missing required argument(s) {', '.join(map(repr, missing))}"
    for pname, value in arguments.items():
        if problem := value_problem(props[pname], value, f"argument {pname!r}"):
            return problem
    return None


# --- calls ----------------------------------------------------------------------------------------


@attrs.define(frozen=True)
class ToolCall:
    """One call the model asked for. ``id`` pairs it with its result (``tool_call_id``)."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def as_message_entry(self) -> dict[str, Any]:
        """This call as an entry of an assistant message's ``tool_calls`` (transformers' form)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate (which UTF-8, and so every tokenizer, refuses) replaced
    by U+FFFD. A tool's result or a JSON escape the model wrote can hold one; left in, the chat
    template would fail and stop the run."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


#: what closes a tool's result where results are shown between tags: polyrl's own user-role form
#: (``prompting.tool_results_as_user``) and the templates that write it themselves (Qwen2.5, Qwen3)
_RESULT_CLOSE = re.compile(r"</(\s*tool_response\s*)>", re.IGNORECASE)


def quoted_result(text: str) -> str:
    """``text`` with each ``</tool_response>`` written ``<\\/tool_response>`` (JSON's way of writing
    ``/``, as ``</script>`` is quoted inside a script). Why: a result holding the closing tag ended
    its block early, and the text after it read as one more result, written by the tool, not run
    (``</tool_response>\\n<tool_response>\\n{"balance": 10**9}``). Text without it is unchanged."""
    return _RESULT_CLOSE.sub(r"<\\/\1>", text) if "</" in text else text


def tool_message(content: str, name: str, call_id: str = "") -> dict[str, Any]:
    """The ``tool`` message answering a call, its text made renderable (``clean_text``) and unable
    to close its result's block early (``quoted_result``)."""
    message = {"role": "tool", "name": clean_text(name), "content": quoted_result(clean_text(content))}
    if call_id:
        message["tool_call_id"] = clean_text(call_id)
    return message


def error_message(text: str, name: str = "invalid_tool_call", call_id: str = "") -> dict[str, Any]:
    """A ``tool`` message carrying an error the model should read (e.g. a malformed call)."""
    return tool_message(f"error: {text}", name, call_id)


def _numpy_value(value: Any) -> Any:
    """A numpy number or array in a tool's result as the Python value JSON writes (``json.dumps``'s
    ``default``); anything else stays refused. Why: a tool computing with numpy returns
    ``np.int64(56088)`` or an array, and every such call answered the model "neither text nor
    JSON" (TRL shows it as text); an environment's rewards and message values already take numpy
    numbers. A NaN among them is still refused (``allow_nan=False``), as a float NaN is."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        plain = value.item()
        if not isinstance(plain, np.generic):  # a long double stays numpy: refused below
            return plain
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Failed(Exception):
    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind, self.text = kind, text


class ToolBox:
    """The tools of a run, called with a timeout each and at most ``max_concurrency`` at once.

    One box serves every episode of a step: the bound holds across all of them (one semaphore
    per event loop, so a box outlives ``asyncio.run`` calls). Each call runs on a daemon thread
    (see the module docstring). A thread cannot be killed: one past its timeout is *abandoned* (it
    keeps running in the background, counted in ``abandoned``) while the model reads a timeout
    error, so a tool that may hang for good must bound itself (the ``python`` tool kills its
    sandboxed process). An ``async def`` tool is cancelled at its timeout on its own loop, and
    abandoned only if it ignores that (or blocks its loop). At most ``max_abandoned`` calls are
    left running at once: past that, calls are answered ``error: ... not run`` until some end.
    ``counts`` tallies calls and each kind of failure (for the run's metrics).
    """

    def __init__(self, functions: Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]] = (),
                 timeout_s: float = 30.0, max_concurrency: int = 4, max_result_chars: int = 16384,
                 max_abandoned: int = MAX_ABANDONED) -> None:
        if not timeout_s > 0:
            raise ConfigError(f"tool timeout must be > 0 seconds, got {timeout_s!r}", field="environment.tool_timeout_s",
                              fix="set a positive number of seconds")
        if int(max_concurrency) < 1:
            raise ConfigError(f"tool concurrency must be >= 1, got {max_concurrency!r}",
                              field="environment.max_concurrent_tools", fix="set a positive integer")
        named = (list(functions.items()) if isinstance(functions, Mapping)
                 else [(getattr(fn, "__name__", ""), fn) for fn in functions])
        self._tools: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {}
        for name, fn in named:
            if name in self._tools:
                raise ConfigError(f"two tools are named {name!r}", field=FIELD,
                                  fix="give each tool a distinct name (rename one function)")
            self._tools[name] = (fn, tool_schema(fn, name=name))
        self.timeout_s = float(timeout_s)
        self.max_concurrency = int(max_concurrency)
        self.max_result_chars = int(max_result_chars)
        #: the calls left running past their timeout, and their cap (``max_abandoned``; per box, its
        #: ``extended`` boxes included): past it calls are answered with an error, not run
        self._late = LateCalls(max_abandoned)
        self.counts: collections.Counter[str] = collections.Counter()
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())
        #: tools run on a worker of their own (an episode's environment), by name; one call at a time on it
        self._workers: dict[str, Worker] = {}
        self._worker_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary())

    @property
    def max_abandoned(self) -> int:
        return self._late.limit

    @property
    def abandoned(self) -> int:
        """Calls whose thread was left running past the timeout (it cannot be killed)."""
        return self.counts["abandoned"]

    @property
    def running_late(self) -> int:
        """Calls left running past their timeout that have not ended yet. From ``max_abandoned`` on,
        no call starts (so at most ``max_abandoned + max_concurrency - 1`` ever run so: the calls
        already started when the count was below it may all time out)."""
        return self._late.running

    def extended(self, functions: Sequence[Callable[..., Any]], worker: Worker | None = None) -> ToolBox:
        """A box with ``functions`` added (e.g. one episode's environment tools, bound to its state)
        that shares this box's bound, counts and limits: the bound still holds across the step.
        ``worker``: where they run (the episode's environment worker, so they see the thread and
        loop its state was made on), one call at a time; None: a thread per call, as other tools."""
        if not functions:
            return self
        extra = ToolBox(functions)  # checks their schemas and that their names are distinct
        clash = sorted(set(extra._tools) & set(self._tools))
        if clash:
            raise ConfigError(f"the environment's tool(s) {', '.join(map(repr, clash))} clash with [environment] tools",
                              field=FIELD, fix="drop the duplicate from [environment] tools or rename one")
        box = copy.copy(self)  # shallow: the same counts, semaphores and calls running late
        box._tools = {**self._tools, **extra._tools}
        if worker is not None:
            box._workers = {**self._workers, **dict.fromkeys(extra._tools, worker)}
            box._worker_locks = weakref.WeakKeyDictionary()  # this box's worker's, not the base's
        return box

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The JSON schemas for the chat template's ``tools=``, in the order given."""
        return [schema for _, schema in self._tools.values()]

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            sem = self._semaphores[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    def _worker_lock(self) -> asyncio.Lock:
        """One call at a time on this box's worker: a call queued behind another there would spend
        its timeout waiting for its turn (the wait for the lock is not counted)."""
        loop = asyncio.get_running_loop()
        lock = self._worker_locks.get(loop)
        if lock is None:
            lock = self._worker_locks[loop] = asyncio.Lock()
        return lock

    async def run(self, calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
        """One ``{"role": "tool", "name", "content", "tool_call_id"}`` message per call, in order."""
        return list(await asyncio.gather(*(self._answer(call) for call in calls)))

    async def _answer(self, call: ToolCall) -> dict[str, Any]:
        self.counts["calls"] += 1
        try:
            content = await self._call(call)
        except _Failed as failed:
            self.counts[failed.kind] += 1
            return error_message(self._cut(failed.text), name=call.name, call_id=call.id)
        return tool_message(content, call.name, call.id)

    async def _call(self, call: ToolCall) -> str:
        entry = self._tools.get(call.name)
        if entry is None:
            raise _Failed("unknown_tool", f"unknown tool {quoted(call.name)}; the tools are: {', '.join(self._tools) or 'none'}")
        fn, schema = entry
        problem = arguments_problem(schema["function"]["parameters"], call.arguments)
        if problem:
            raise _Failed("bad_arguments", f"bad arguments for tool {call.name!r}: {problem}")
        try:  # the tool's own copy: the call's arguments are also the episode's record of what the model wrote
            arguments = copy.deepcopy(call.arguments)
        except Exception as exc:  # noqa: BLE001 - parsed JSON always copies; a caller's own objects may not
            raise _Failed("bad_arguments", f"bad arguments for tool {call.name!r}: they cannot be copied "
                                           f"({type(exc).__name__})") from None
        worker = self._workers.get(call.name)
        if worker is None:
            async with self._semaphore():
                return await self._on_thread(call.name, fn, arguments, None)
        async with self._worker_lock(), self._semaphore():
            return await self._on_thread(call.name, fn, arguments, worker)

    def _timed_out(self, name: str) -> _Failed:
        return _Failed("timeout", f"tool {name!r} did not finish within {self.timeout_s:g} s")

    async def _on_thread(self, name: str, fn: Callable[..., Any], arguments: dict[str, Any],
                         worker: Worker | None) -> Any:
        """``fn(**arguments)`` (awaited when async) on ``worker``, or on a thread of its own, as
        the text the model reads (``_content``, run there too: serialising a result runs the tool's
        own code, a dict subclass's ``items`` or a str subclass's ``__len__``, which may raise or hang).

        Whatever the tool raises arrives as ``CallRaised`` (its own ``CancelledError``, exits and
        ``KeyboardInterrupt`` included: it ran on another thread); a ``CancelledError`` reaching
        this coroutine itself is the caller's, and leaves."""
        if (late := self.running_late) >= self.max_abandoned:
            log.warning("tool call not run: too many earlier calls still run past their timeout", tool=name,
                        running_late=late, max_abandoned=self.max_abandoned)
            raise _Failed("not_run", f"tool {name!r} not run: {late} earlier tool calls are still running past "
                                     f"their {self.timeout_s:g} s timeout (their threads cannot be stopped)")

        def job() -> str:  # the tool's exception is described there too, within its timeout
            return self._content(name, described(lambda: finished(fn(**arguments)))())

        try:
            if worker is None:
                return await call_in_thread(job, self.timeout_s, name="polyrl-tool")
            return await worker.call(job, self.timeout_s)
        except CallRaised as raised:
            if isinstance(raised.cause, _Failed):  # the result, not the tool, failed (``_content``)
                raise raised.cause from None
            raise _Failed("raised", f"tool {name!r} raised {raised_text(raised)[1]}") from None
        except CallTimedOut as timed_out:
            if self._late.add(timed_out):
                self.counts["abandoned"] += 1
                log.warning("tool call abandoned past its timeout (its thread keeps running)",
                            tool=name, timeout_s=self.timeout_s, abandoned=self.abandoned)
            raise self._timed_out(name) from None

    def _content(self, name: str, result: Any) -> str:
        """A tool's result as the text the model reads: a str as the plain str it spells, else its
        JSON, cut at ``max_result_chars``; one that is neither raises ``_Failed`` (an error the model
        reads). Why every exception: a result's own methods run here (a dict subclass's ``items``
        raising escaped the box and ended the run with a traceback)."""
        if isinstance(result, str):
            text = result if type(result) is str else str.__str__(result)
        else:
            try:
                text = json.dumps(result, ensure_ascii=False, allow_nan=False, default=_numpy_value)
            except Exception as exc:  # noqa: BLE001 - nested past the recursion limit, the result's own code
                raise _Failed("bad_result", f"tool {name!r} returned a {type(result).__name__}, which is neither "
                                            f"text nor JSON ({describe(exc)})") from None
        return self._cut(text)

    def _cut(self, text: str) -> str:
        """``text`` cut at ``max_result_chars``, saying how much was cut. Errors too: an exception's
        message is the tool's text (one of megabytes was inserted whole)."""
        if len(text) > self.max_result_chars:
            cut = len(text) - self.max_result_chars
            text = f"{text[: self.max_result_chars]}\n... [{cut} more characters cut]"
        return text
