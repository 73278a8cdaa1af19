"""A model folder's chat template rendered within bounds of time and memory.

Why: the template is Jinja from a downloaded folder. transformers renders it in Jinja's immutable
sandbox, which stops file and attribute access but not work: ``{{ "x" * 10000000000 }}`` asks for
10 GB at once, two nested ``range(100000)`` loops run for hours, ``messages[0].content * 100000``
grows with the prompt. Here the template is compiled in a subclass of that same sandbox, built
from transformers' own environment (its extensions, filters, globals and whitespace settings), in
which every string or list the template builds (operators, calls, filters, ``~``, literals, block
captures and the output) is sized before or right after it is made, loop iterations and calls are
counted and a deadline is checked. A real template renders exactly as ``apply_chat_template`` does;
one past a bound is one ``ConfigError`` naming the field that named the folder.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from polyrl.errors import OutOfMemory, TemplateRefused

#: characters (or items, counted deeply) of any one value a template builds, its output included:
#: far beyond any model's context (a million tokens is about 4 million characters)
MAX_CHARS = 8_000_000
#: characters all the template's ``{{ }}`` write in one rendering, into the output or into what a
#: ``{% set %}`` block or a macro collects before joining it
MAX_PRODUCED = 8 * MAX_CHARS
#: loop iterations and calls in one rendering (a real template makes a few per message)
MAX_STEPS = 1_000_000
#: a number given to a call or filter (a width, a count): no real template asks for more
MAX_ARGUMENT = 100_000
#: wall time of one rendering; a real one takes milliseconds
DEADLINE_S = 5.0

_state = threading.local()  # this thread's rendering: [deadline, steps left, characters left]
_WIDTH = re.compile(r"\d+")
_FIELD = re.compile(r"\{[^{}]*\}")
_DIRECTIVE = re.compile(r"%[^a-zA-Z%]*")


class TemplateBoundsError(Exception):
    """A template went past one of the bounds (the message says which); not a ValueError, so
    nothing between the hook and ``render_chat`` mistakes it for a template's own failure."""


def _weight(value: Any, limit: int = MAX_CHARS) -> int:
    """Characters and items in ``value``, counted through lists, tuples and dicts; stops past ``limit``."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if not isinstance(value, (list, tuple, dict, set, frozenset)):
        return 0
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, dict):
            total += len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item)
            stack.extend(item)
    return total


def _refuse_past(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise TemplateBoundsError(f"{what} would build {size:,} characters (at most {MAX_CHARS:,})")


def _spend(size: int) -> None:
    state = getattr(_state, "budget", None)
    if state is not None:
        state[2] -= size
        if state[2] < 0:
            raise TemplateBoundsError(f"produced more than {MAX_PRODUCED:,} characters in all")


def _sized(value: Any, what: str) -> Any:
    _refuse_past(_weight(value), what)
    return value


def _tick() -> None:
    state = getattr(_state, "budget", None)
    if state is not None and time.monotonic() > state[0]:
        raise TemplateBoundsError(f"rendering ran past {DEADLINE_S:g} s")


def _step(state: list[Any] | None) -> None:
    """One loop iteration or call; the clock is read every 1024."""
    if state is not None:
        state[1] -= 1
        if state[1] < 0:
            raise TemplateBoundsError(f"loops and calls ran past {MAX_STEPS:,} steps")
        if not state[1] & 1023:
            _tick()


def _numbers(args: Iterable[Any], what: str, limit: int = MAX_ARGUMENT) -> None:
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > limit:
            raise TemplateBoundsError(f"{what} was given {arg} (at most {limit:,})")


def _format_widths(text: str, fields: re.Pattern[str], what: str) -> None:
    """Widths and precisions written in a format string (``%9999999d``, ``{:>9999999}``)."""
    for field in fields.findall(text):
        _numbers((int(n) for n in _WIDTH.findall(field)), what)


def _percent(text: str, args: Any) -> None:
    _format_widths(text, _DIRECTIVE, "a '%' format")
    values = args if isinstance(args, tuple) else (args,)
    if any("*" in d for d in _DIRECTIVE.findall(text)):
        _numbers(values, "a '%' format's '*' width")


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _join_size(sep: str, items: Any) -> int:
    if not isinstance(items, (list, tuple)):
        return 0
    return len(sep) * max(len(items) - 1, 0) + _weight(items)


def _replace_size(text: Any, old: Any, new: Any) -> int:
    if not (isinstance(text, str) and isinstance(old, str) and isinstance(new, str)):
        return 0
    hits = text.count(old) if old else len(text) + 1
    return len(text) + hits * max(len(new) - len(old), 0)


def _binop_size(operator: str, left: Any, right: Any) -> int:
    """What ``left operator right`` would build, before it is built."""
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(n, int) and not isinstance(n, bool) and not isinstance(seq, (int, float)):
                return _weight(seq) * max(n, 0)
        if isinstance(left, int) and isinstance(right, int):
            return (left.bit_length() + right.bit_length()) // 8
    elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        return left.bit_length() * right // 8
    elif operator == "+":
        return _weight(left) + _weight(right)
    elif operator == "%" and isinstance(left, str):
        _percent(left, right)
    return 0


def _call_size(obj: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """Checks of a call's arguments; what it would build where that can be known beforehand."""
    wrapped = getattr(obj, "__wrapped__", obj)  # the sandbox's str.format wrapper
    owner, name = getattr(wrapped, "__self__", None), getattr(wrapped, "__name__", "")
    if isinstance(owner, str) and name in ("format", "format_map"):
        _format_widths(owner, _FIELD, "a format string")
        return 0
    _numbers([*args, *kwargs.values()], f"{name or 'a call'}()")
    if isinstance(owner, str) and name == "join" and args:
        return _join_size(owner, args[0])
    if isinstance(owner, str) and name == "replace" and len(args) >= 2:
        return _replace_size(owner, args[0], args[1])
    return 0


def _filter_size(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """Checks of a filter's arguments (``args[0]`` is the filtered value, after any context)."""
    if name == "format":
        if args and isinstance(args[0], str):
            _percent(args[0], tuple(args[1:]))
        return 0
    _numbers([*args[1:], *kwargs.values()], f"the {name!r} filter")
    value = args[0] if args else None
    if name == "join":
        return _join_size(str(kwargs.get("d", args[1] if len(args) > 1 else "")), value)
    if name == "replace" and len(args) >= 3:
        return _replace_size(value, args[1], args[2])
    if name == "indent" and isinstance(value, str):
        width = kwargs.get("width", args[1] if len(args) > 1 else 4)
        return (value.count("\n") + 1) * (len(width) if isinstance(width, str) else _int(width)) + len(value)
    if name == "wordwrap" and isinstance(value, str):
        width = _int(kwargs.get("width", args[1] if len(args) > 1 else 79))
        wrap = kwargs.get("wrapstring", args[3] if len(args) > 3 else None)
        return len(value) + len(value) // max(width, 1) * len(wrap if isinstance(wrap, str) else "\n")
    if name == "tojson":  # its output is sized after; an indent is repeated on every line, nested
        _numbers([kwargs.get("indent", args[1] if len(args) > 1 else None)], "tojson's indent", limit=64)
    return 0


def _bounded_filter(name: str, func: Any) -> Any:
    """``func`` sized before and after; it keeps the attributes that tell Jinja what to pass it."""
    @functools.wraps(func)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        plain = args[1:] if getattr(func, "jinja_pass_arg", None) is not None else args
        _refuse_past(_filter_size(name, plain, kwargs), f"the {name!r} filter")
        return _sized(func(*args, **kwargs), f"the {name!r} filter")
    return bounded


class _Counted(NodeTransformer):
    """Loops through ``polyrl_steps`` (counted), ``~`` and literals through ``polyrl_sized``."""

    def _wrap(self, method: str, node: nodes.Node) -> nodes.Expr:
        return nodes.Call(nodes.EnvironmentAttribute(method), [node], [], None, None, lineno=node.lineno)

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = self._wrap("polyrl_steps", node.iter)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return self._wrap("polyrl_sized", node)

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        return node if getattr(node, "ctx", "load") != "load" else self._wrap("polyrl_sized", node)

    visit_List = visit_Tuple = visit_Dict = _literal


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox with every way a template builds or loops sized or counted."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and type(left) is str and type(right) is str:  # most of a template's work: kept quick
            _refuse_past(len(left) + len(right), "'+'")
            return left + right
        _tick()
        _refuse_past(_binop_size(operator, left, right), f"'{operator}'")
        return _sized(super().call_binop(context, operator, left, right), f"'{operator}'")

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        _step(getattr(_state, "budget", None))
        _tick()
        _refuse_past(_call_size(obj, args, kwargs), "a call")
        return _sized(super().call(context, obj, *args, **kwargs), "a call")

    def concat(self, parts: Iterable[str]) -> str:  # Jinja's "".join, sized
        kept, size = [], 0
        for part in parts:
            size += len(part)
            _refuse_past(size, "the rendering")
            kept.append(part)
        return "".join(kept)

    def polyrl_steps(self, iterable: Any) -> Iterator[Any]:
        state = getattr(_state, "budget", None)
        for item in iterable:
            _step(state)
            yield item

    def polyrl_sized(self, value: Any) -> Any:
        return _sized(value, "'~' or a literal")


def _finalize(value: Any) -> str:
    """Each ``{{ }}``'s text, counted (Jinja writes ``str(value)`` without a finalize: the same text).
    What a template writes is all a ``{% set %}`` block or a macro collects before joining it."""
    _tick()
    text = str(value)
    _refuse_past(len(text), "'{{ }}'")
    _spend(len(text))
    return text


@functools.lru_cache(maxsize=32)
def compile_bounded(template: str) -> Any:
    """``template`` compiled in the bounded copy of transformers' chat-template environment."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    base = _compile_jinja_template("").environment  # transformers' environment, never the untrusted text
    settings = {key: getattr(base, key) for key in (
        "block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
        "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
        "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "undefined",
        "autoescape", "optimized")}
    if base.finalize is not None or base.autoescape:  # what _finalize stands in for would differ
        raise RuntimeError("transformers' chat-template environment changed: polyrl's bounds need a review")
    env = _BoundedSandbox(extensions=[type(ext) for ext in base.extensions.values()], finalize=_finalize, **settings)
    env.filters.update({name: _bounded_filter(name, f) for name, f in base.filters.items()})
    env.tests.update(base.tests)
    env.globals.update(base.globals)
    env.policies.update(base.policies)
    return env.from_string(_Counted().visit(env.parse(template)))


def render_chat(tokenizer: Any, conversation: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                add_generation_prompt: bool, field: str, template_kwargs: Mapping[str, Any] | None = None) -> str:
    """``tokenizer.apply_chat_template(conversation, tools=tools, tokenize=False, ...,
    **template_kwargs)``'s text, rendered within the bounds above; past one, a ConfigError on
    ``field`` (the folder's); a ``MemoryError`` within them, ``OutOfMemory``. ``template_kwargs`` (``model.chat_template_kwargs``) are template
    variables, over the special tokens' as in transformers."""
    extra = dict(template_kwargs or {})
    if not hasattr(tokenizer, "get_chat_template") or not hasattr(tokenizer, "special_tokens_map"):
        # not transformers' tokenizer (a test's fake): no folder's Jinja to bound, it renders its own way
        return str(tokenizer.apply_chat_template(list(conversation), tools=tools, tokenize=False,
                                                 add_generation_prompt=add_generation_prompt, **extra))
    schemas = None if tools is None else [dict(t) for t in tools]
    template = tokenizer.get_chat_template(None, schemas)
    _state.budget = [time.monotonic() + DEADLINE_S, MAX_STEPS, MAX_PRODUCED]
    try:
        return str(compile_bounded(template).render(messages=list(conversation), tools=schemas, documents=None,
                                                    add_generation_prompt=add_generation_prompt,
                                                    **{**tokenizer.special_tokens_map, **extra}))
    except TemplateBoundsError as exc:
        folder = getattr(tokenizer, "name_or_path", "") or "the model"
        raise TemplateRefused(f"the chat template of {folder!r} is refused: {exc}", reason=str(exc), field=field,
                              fix="use a model folder whose chat template is a real one (a downloaded folder is "
                                  "untrusted; compare its chat template with the original model's)") from None
    except MemoryError:  # within the bounds above: the process's memory, not the template, ran short
        raise OutOfMemory(f"the chat template of {getattr(tokenizer, 'name_or_path', '')!r} rendered a conversation "
                          f"({len(conversation)} message(s))") from None
    finally:
        _state.budget = None
