"""Where a completion's answer starts when the model reasons first (``<think>...</think>``).

One rule for every reader of a turn: the rewards read the answer after the last ``</think>``
(``polyrl.rewards.builtin``), and the episode runner reads tool calls there too
(``polyrl.agents.parsing``), so a call or an answer the model only drafted while reasoning is
neither run nor scored.

Some chat templates open the reasoning themselves: their generation prompt ends with ``<think>\\n``
(QwQ, DeepSeek-R1's distills, Qwen3's thinking-only models), so the completion starts inside it
and holds no ``<think>`` of its own. Such a completion cut off before its ``</think>`` is all
reasoning, which its text alone cannot tell from a model that does not reason. The trainer asks the
template once (``think_suffix``) and marks each completion whose prompt ends so
(``Completion.reasoning_open``); the readers pass that on as ``opened``.

A tokenizer may make ``<think>`` and ``</think>`` special tokens; the backends decode completions
with ``skip_special_tokens`` (no ``<|im_end|>`` in a reward's text), which then dropped the tags
too, so the rewards read the reasoning as the answer ("<think>so 4</think>2" read as "so 42").
``polyrl.backend_kit.tokens.completion_decoder`` keeps the tags and drops the other special tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def final_part(text: str, opened: bool = False) -> str | None:
    """The part of a completion that holds its answer: the text after its last ``</think>`` (all
    of it when there is none), or None when a ``<think>`` is left open there (reasoning cut off
    before any answer). As TRL's ``reasoning_accuracy_reward``, which splits on ``</think>``, except
    that a completion with no think tags at all is read whole (a model that does not reason).
    ``opened``: the prompt opened the ``<think>`` (``think_suffix``), so a text without any
    ``</think>`` is reasoning cut off, with no answer (None)."""
    _, closed, rest = text.rpartition(THINK_CLOSE)
    if not closed and opened:
        return None
    rest = rest if closed else text
    return None if THINK_OPEN in rest else rest


def think_suffix(encode_chat: Callable[[list[dict[str, Any]], bool], Sequence[int] | np.ndarray],
                 decode: Callable[[Sequence[int]], str]) -> np.ndarray | None:
    """The ids of the chat template's generation prompt when it leaves a ``<think>`` open (a prompt
    ending with them makes the model start inside its reasoning), else None. ``encode_chat(messages,
    add_generation_prompt)`` is the run's; ``decode`` the tokenizer's. Why ids: every completion
    carries its prompt's ids, so ``opens_reasoning`` asks each one without decoding it."""
    suffix = generation_prompt(encode_chat)
    if not len(suffix) or final_part(decode(suffix.tolist())) is not None:
        return None
    return suffix


def generation_prompt(encode_chat: Callable[[list[dict[str, Any]], bool], Sequence[int] | np.ndarray]) -> np.ndarray:
    """The ids the chat template adds for ``add_generation_prompt`` (after a user message)."""
    probe = [{"role": "user", "content": "hi"}]
    with_prompt = np.asarray(encode_chat(probe, True), dtype=np.int64).reshape(-1)
    without = np.asarray(encode_chat(probe, False), dtype=np.int64).reshape(-1)
    n = 0
    while n < min(len(with_prompt), len(without)) and with_prompt[n] == without[n]:
        n += 1
    return with_prompt[n:]


def closes_reasoning(encode_chat: Callable[[list[dict[str, Any]], bool], Sequence[int] | np.ndarray],
                     decode: Callable[[Sequence[int]], str]) -> bool:
    """Whether the generation prompt holds a closed ``<think>`` block itself (Qwen3 with
    ``enable_thinking = false``): the model then writes no reasoning of its own."""
    return THINK_CLOSE in decode(generation_prompt(encode_chat).tolist())


def opens_reasoning(prompt_ids: Sequence[int] | np.ndarray, suffix: np.ndarray | None) -> bool:
    """Whether a prompt ends with the template's reasoning-opening generation prompt (``think_suffix``)."""
    if suffix is None or len(prompt_ids) < len(suffix):
        return False
    return bool(np.array_equal(np.asarray(prompt_ids)[len(prompt_ids) - len(suffix):], suffix))

