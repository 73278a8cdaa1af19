"""Many dataset prompts' ids in one tokenizer call: the startup prompt-length check's counting.

Why: the check (``polyrl.data.check_prompt_lengths``) encodes every prompt once; one tokenizer call
per row cost most of its time at 100k rows (each call's Python set-up, and a fast tokenizer's Rust
side never given more than one text to share between threads). Here the texts (a chat: its
rendering) are tokenized in one call, each prompt's ids exactly what ``encode_prompt`` gives it:
the same rules (``text_prompt_ids``, ``encode_chat_literal``, ``given_a_start``), a chat spelling a
special-token string, or a prompt of another kind, left to ``one`` (the engine's ``encode_prompt``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from polyrl.backend_kit.chat import require_chat_template
from polyrl.backend_kit.literal_chat import _strings
from polyrl.backend_kit.template_limits import render_chat
from polyrl.backend_kit.tokens import given_a_start
from polyrl.backend_kit.turn_markers import template_markers


def encode_prompts(tokenizer: Any, prompts: Sequence[Any], one: Callable[[Any], list[int]], model: str,
                   template_kwargs: Mapping[str, Any] | None = None) -> list[list[int]]:
    """``[one(p) for p in prompts]``, with text prompts and the chats whose text spells no special
    token tokenized in two batch calls (the text ones with the tokenizer's special tokens added, the
    chats' renderings without, as ``encode_prompt`` does). ``model``: what the no-template error names."""
    out: list[list[int] | None] = [None] * len(prompts)
    texts: list[tuple[int, str]] = []
    chats: list[tuple[int, str]] = []
    spelled: re.Pattern[str] | None = None  # any marker's string (one search per text, not one per token)
    for k, prompt in enumerate(prompts):
        if isinstance(prompt, str):
            texts.append((k, prompt))
            continue
        if not isinstance(prompt, list):  # a TokenPrompt: the engine's own checks
            out[k] = one(prompt)
            continue
        if spelled is None:
            require_chat_template(tokenizer, model)
            specials = sorted(template_markers(tokenizer, template_kwargs), key=len, reverse=True)
            spelled = re.compile("|".join(re.escape(s) for s in specials) or r"(?!)")
        conversation = [dict(m) for m in prompt]
        if any(spelled.search(t) for t in _strings(conversation)):  # read as text: one at a time
            out[k] = one(prompt)
            continue
        chats.append((k, render_chat(tokenizer, conversation, None, True, "model.path", template_kwargs)))
    if texts:  # as text_prompt_ids calls it
        ids = tokenizer([text for _, text in texts], add_special_tokens=True)["input_ids"]
        for (k, _), row in zip(texts, ids, strict=True):
            out[k] = given_a_start(tokenizer, row)
    if chats:  # as encode_chat_literal calls it
        ids = tokenizer([text for _, text in chats], add_special_tokens=False, verbose=False)["input_ids"]
        for (k, _), row in zip(chats, ids, strict=True):
            out[k] = given_a_start(tokenizer, row)
    return cast(list[list[int]], out)  # every prompt's slot is filled above
