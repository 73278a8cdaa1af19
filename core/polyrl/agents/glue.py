"""The token ids the chat template inserts between an episode's sampled turns.

Why a module of its own: this is where polyrl differs from peers that re-render the whole
conversation as text each turn. Nothing sampled is ever re-encoded here; only the template's own
glue (the rest of the assistant turn's end marker, the tool/observation messages, the next
``assistant`` header) is tokenized, as the *difference* between two renderings of a conversation
that differ only by the new messages. Those renderings use stand-in assistant text, so the
difference never depends on what the model wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from polyrl.errors import ConfigError

class RenderError(ConfigError):
    """The chat template raised on a conversation: a config error on an episode's first prompt,
    an ended episode after that (the conversation's content, not the setup, may be at fault)."""


#: ``encode_chat(messages, tools, add_generation_prompt) -> ids`` (the ``encode_chat`` hook).
EncodeChat = Callable[[Sequence[Mapping[str, Any]], "Sequence[Mapping[str, Any]] | None", bool], np.ndarray]

_PROBE_A, _PROBE_B = "a", "b c d"


def _common_suffix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = 0
    while n < min(len(a), len(b)) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return a[len(a) - n:] if n else a[:0]


def _starts_with(ids: np.ndarray, prefix: np.ndarray) -> bool:
    return len(ids) >= len(prefix) and bool(np.array_equal(ids[: len(prefix)], prefix))


class ChatGlue:
    """Computes inserted segments for one model's chat template (and one tool list)."""

    def __init__(self, encode_chat: EncodeChat) -> None:
        self._encode = encode_chat
        self._turn_end: np.ndarray | None = None

    def encode(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool,
               tools: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
        try:
            ids = self._encode(list(messages), list(tools) if tools else None, add_generation_prompt)
        except ConfigError:
            raise
        except Exception as exc:  # a template that cannot render a role (e.g. no "tool" role)
            roles = sorted({str(m.get("role")) for m in messages})
            raise RenderError(
                f"the model's chat template cannot render this conversation (roles {', '.join(roles)}): "
                f"{type(exc).__name__}: {exc}", field="environment",
                fix="use a model whose chat template renders tool/observation messages, or an "
                    "environment that answers with 'user' messages") from exc
        return np.asarray(ids, dtype=np.int64).reshape(-1)

    def prompt(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
        """The first prompt's ids: the messages (and tools) and a generation prompt."""
        return self.encode(messages, True, tools)

    def turn_end(self, context: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
        """What the template writes after an assistant message's content (e.g. ``<|im_end|>\\n``),
        found as the common tail of two renderings with different stand-in contents."""
        if self._turn_end is None:
            head = self.encode(context, True, tools)
            tails = []
            for text in (_PROBE_A, _PROBE_B):
                ids = self.encode([*context, {"role": "assistant", "content": text}], False, tools)
                if not _starts_with(ids, head):
                    raise ConfigError(
                        "the chat template renders an assistant reply that does not continue its own "
                        "generation prompt, so episode turns cannot be joined exactly", field="environment",
                        fix="use a model whose chat template appends assistant turns (ChatML, Llama 3, ...)")
                tails.append(ids[len(head):])
            self._turn_end = _common_suffix(tails[0], tails[1])
        return self._turn_end

    def close_turn(self, context: Sequence[Mapping[str, Any]], sampled: np.ndarray,
                   tools: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
        """The rest of the turn-end marker after a sampled turn: the sampled ids already hold its
        first tokens when the model stopped on the end-of-turn token."""
        end = self.turn_end(context, tools)
        for k in range(min(len(end), len(sampled)), 0, -1):
            if np.array_equal(sampled[len(sampled) - k:], end[:k]):
                return end[k:]
        return end

    def observation(self, context: Sequence[Mapping[str, Any]], assistant: Mapping[str, Any],
                    new_messages: Sequence[Mapping[str, Any]],
                    tools: Sequence[Mapping[str, Any]] | None = None) -> np.ndarray:
        """The ids of ``new_messages`` plus the next generation prompt, as the template renders
        them after ``assistant`` (whose text is replaced by a stand-in: only its tool calls, which
        some templates check tool results against, are kept)."""
        stand_in = {"role": "assistant", "content": _PROBE_A}
        if assistant.get("tool_calls"):
            stand_in["tool_calls"] = assistant["tool_calls"]
        before = self.encode([*context, stand_in], False, tools)
        after = self.encode([*context, stand_in, *new_messages], True, tools)
        if not _starts_with(after, before):
            raise ConfigError(
                "the chat template renders earlier turns differently once new messages follow them, "
                "so the episode cannot continue from the exact ids sampled", field="environment",
                fix="use a model whose chat template appends messages without rewriting earlier ones")
        return after[len(before):]
