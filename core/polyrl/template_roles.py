"""Which message roles a chat template shows the model, asked of the template itself.

Why: a template writes the roles it knows and drops any other message without a word. Qwen2.5's
writes ``system``, ``user``, ``assistant`` and ``tool`` and nothing of a ``developer`` or
``ipython`` message; Phi-3's drops ``tool`` too. A dataset prompt or an environment's first
messages holding such a message reached the model without it, and nobody was told. No list of
roles per family is kept here: a message is shown when its text changes the rendering (the
conversation rendered with a stand-in text in every message, then with another in that message
alone, differs).

Whether a template shows a message can hang on its neighbours, not its role alone: Mistral's
writes the system message into the last user turn, so it vanishes from a conversation ending in
a tool result; others show a system message only first, or a tool message only after a tool
call, or change with the tools given. So the verdict is asked of the conversation's own shape
(each message's role, whether it calls tools, whether it has text) and the caller's ``context``
(e.g. whether tools are given), and kept per shape: a dataset has a handful of shapes, so the
check costs a few renderings per shape, not per prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from polyrl.data_arrow import CHAT_ROLES, bare_tool_call

#: ``render(messages) -> ids``: the conversation as the model would see it (generation prompt included)
Render = Callable[[list[dict[str, Any]]], Any]

#: what to do about a message the template drops (the environment's case; a dataset's adds
#: ``MODEL_FIX``: its prompts may be written for another model)
ROLE_FIX = ("give that text a role the template renders in that place (its instructions as 'system', or "
            "'user'), or move it where the template shows it")
MODEL_FIX = ", or use a model whose chat template renders that role"
#: what to do about an assistant tool call the template writes without its calls
CALL_FIX = "write the call as text in the message's content"

_MARKS = ("a", "b c d")  # two stand-in texts: a template that shows a message renders them apart

#: what a message's place in the conversation is judged by: (role, calls tools, has text, content null)
#: per message (a template may write a call for a null content and the content alone for ``""``)
Shape = tuple[tuple[str, bool, bool, bool], ...]


def _has_text(m: Mapping[str, Any]) -> bool:
    """A message with no text to lose (an assistant's bare tool call) is not probed."""
    content = m.get("content")
    return not (content is None or content == "")


def _named_calls(m: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``m`` with every call's function named ``name`` (its arguments kept), in either call shape
    (``{"function": {"name", "arguments"}}``, or the name at the top)."""
    calls = []
    for call in m.get("tool_calls") or []:
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            calls.append({**call, "function": {**call["function"], "name": name}})
        elif isinstance(call, Mapping):
            calls.append({**call, "name": name})
        else:
            calls.append(call)
    return {**m, "tool_calls": calls}


def _shape(messages: Sequence[Mapping[str, Any]]) -> Shape:
    return tuple((str(m.get("role")), bool(m.get("tool_calls")), _has_text(m), m.get("content") is None)
                 for m in messages)


def _rendered(render: Render, messages: list[dict[str, Any]]) -> np.ndarray | None:
    """The rendering's ids; None when the template refuses the conversation (its own error says
    so where the conversation is rendered for real)."""
    try:
        return np.asarray(render(messages))
    except Exception:  # noqa: BLE001 - the template is the model folder's code
        return None


def _marked(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with every message's text the first stand-in (its other keys kept)."""
    return [{**m, "content": _MARKS[0]} if _has_text(m) else dict(m) for m in messages]


class TemplateRoles:
    """What one tokenizer's chat template shows; see the module docstring."""

    def __init__(self) -> None:
        self._dropped: dict[tuple[Hashable, Shape], int | None] = {}
        self._calls: dict[tuple[Hashable, Shape], int | None] = {}
        self._in_place: dict[tuple[Hashable, Shape, int], tuple[str, ...]] = {}

    def dropped(self, messages: Sequence[Mapping[str, Any]], render: Render, context: Hashable = None) -> int | None:
        """The index of the first message whose text the template does not render, or None.
        ``context``: what else ``render`` varies by between calls (e.g. whether tools are given)."""
        key = (context, _shape(messages))
        if key not in self._dropped:
            self._dropped[key] = self._probe(messages, render)
        return self._dropped[key]

    @staticmethod
    def _probe(messages: Sequence[Mapping[str, Any]], render: Render) -> int | None:
        """The first message whose stand-in text, swapped for the other, leaves the rendering as
        it was. A template that refuses the probe is taken to show the messages (refusing is not
        dropping)."""
        base = _marked(messages)
        first = _rendered(render, base)
        if first is None:
            return None
        for i, m in enumerate(base):
            if not _has_text(m):
                continue
            other = _rendered(render, [*base[:i], {**m, "content": _MARKS[1]}, *base[i + 1:]])
            if other is not None and np.array_equal(first, other):
                return i
        return None

    def dropped_call(self, messages: Sequence[Mapping[str, Any]], render: Render,
                     context: Hashable = None) -> int | None:
        """The index of the first assistant message with tool calls whose calls the template does
        not render (renaming them leaves the rendering as it was), or None. Why: a template without
        tool support writes an assistant message's content alone, so the model would read an empty
        turn (content null or ``""``, as many datasets write a call) or the text before the call,
        its calls gone; TRL renders it so without a word. A template refusing the probe is the
        caller's error to report (refusing is not dropping)."""
        key = (context, _shape(messages))
        if key not in self._calls:
            self._calls[key] = self._probe_calls(messages, render)
        return self._calls[key]

    @staticmethod
    def _probe_calls(messages: Sequence[Mapping[str, Any]], render: Render) -> int | None:
        base = _marked(messages)
        for i, m in enumerate(base):
            if not bare_tool_call(m):  # any content: "" or text before the call loses the call alike
                continue
            named = [*base[:i], _named_calls(m, "probe_a"), *base[i + 1:]]
            first = _rendered(render, named)
            other = _rendered(render, [*named[:i], _named_calls(m, "probe_b"), *named[i + 1:]])
            if first is not None and other is not None and np.array_equal(first, other):
                return i
        return None

    def shown_in_place(self, messages: Sequence[Mapping[str, Any]], index: int, render: Render,
                       context: Hashable = None) -> list[str]:
        """The roles of ``CHAT_ROLES`` the template shows in message ``index``'s place (for the
        error that names what to use instead), asked once per place and shape."""
        key = (context, _shape(messages), index)
        if key not in self._in_place:
            base = _marked(messages)

            def shown(role: str) -> bool:
                placed = [*base[:index], {"role": role, "content": _MARKS[0]}, *base[index + 1:]]
                a = _rendered(render, placed)
                b = _rendered(render, [*placed[:index], {"role": role, "content": _MARKS[1]}, *placed[index + 1:]])
                return a is not None and b is not None and not np.array_equal(a, b)

            self._in_place[key] = tuple(r for r in CHAT_ROLES if shown(r))
        return list(self._in_place[key])

    def problem(self, messages: Sequence[Mapping[str, Any]], render: Render,
                context: Hashable = None) -> tuple[int, str] | None:
        """(the index of the first message the template drops, what it drops and what it would
        show there), or None when it shows every message."""
        i = self.dropped(messages, render, context)
        if i is None:
            return None
        shown = self.shown_in_place(messages, i, render, context)
        there = ", ".join(map(repr, shown)) if shown else "none of " + ", ".join(map(repr, CHAT_ROLES))
        return i, (f"has role {str(messages[i].get('role'))!r}, which the model's chat template does not render "
                   f"(in that place it renders {there}): the model would never read that message")


__all__ = ["CALL_FIX", "MODEL_FIX", "ROLE_FIX", "Render", "Shape", "TemplateRoles"]
