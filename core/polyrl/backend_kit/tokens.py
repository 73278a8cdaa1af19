"""Token-level facts every backend reads from an HF-style tokenizer the same way."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.call_markers import CALL_MARKERS
from polyrl.reasoning import THINK_CLOSE, THINK_OPEN

#: tags a completion's text keeps when they are special tokens: the reasoning's (the rewards and the
#: tool-call parser read the answer after ``</think>``) and the tool-call markers (the parser finds
#: calls by them: Mistral's ``[TOOL_CALLS]``, Phi-4-mini's ``<|tool_call|>`` are special tokens)
KEPT_TAGS = (THINK_OPEN, THINK_CLOSE, *CALL_MARKERS)


def pad_token_id(tokenizer: Any) -> int:
    """The id to pad batches with: the tokenizer's pad token, else its EOS, else 0.

    Why a fallback: many chat models ship no pad token; padded positions are masked out, so any
    valid id works, and EOS is one every model has."""
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if isinstance(value, int):
            return value
    return 0


def text_prompt_ids(tokenizer: Any, text: str) -> list[int]:
    """A text prompt's ids as every backend encodes it: the tokenizer's special tokens added
    (``given_a_start``: an empty text still gets one position)."""
    return given_a_start(tokenizer, tokenizer(text, add_special_tokens=True)["input_ids"])


def given_a_start(tokenizer: Any, ids: Any) -> list[int]:
    """``ids`` as ints; an empty prompt becomes the BOS (else the pad id): generation needs one
    position to predict from."""
    out = [int(i) for i in ids]
    if not out:
        bos = tokenizer.bos_token_id
        out = [int(bos) if bos is not None else pad_token_id(tokenizer)]
    return out


def special_tag_ids(tokenizer: Any) -> frozenset[int]:
    """The ids of ``KEPT_TAGS`` (``<think>`` / ``</think>``, the tool-call markers) that are special
    tokens of this (Hugging Face) tokenizer, which ``decode(..., skip_special_tokens=True)`` would
    drop; empty when they are plain tokens, are not one token, or the tokenizer says nothing of them."""
    skipped = _skipped_ids(tokenizer)
    found: set[int] = set()
    for tag in KEPT_TAGS:
        try:
            tag_id = tokenizer.convert_tokens_to_ids(tag)
        except Exception:  # noqa: BLE001 - a tokenizer without the lookup: nothing to keep
            continue
        if isinstance(tag_id, int) and tag_id in skipped and tag_id != getattr(tokenizer, "unk_token_id", None):
            found.add(tag_id)
    return frozenset(found)


def _skipped_ids(tokenizer: Any) -> frozenset[int]:
    """The ids ``skip_special_tokens`` drops: the named special tokens and every added token marked
    special (a fast tokenizer skips those too, named or not)."""
    ids = {int(i) for i in (getattr(tokenizer, "all_special_ids", None) or ())}
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if isinstance(added, Mapping):
        ids.update(int(i) for i, token in added.items() if getattr(token, "special", False))
    return frozenset(ids)


def completion_decoder(tokenizer: Any) -> Callable[[Sequence[int]], str]:
    """``decode(ids)`` for completion text: the tokenizer's ``skip_special_tokens`` decode, except
    that special ``KEPT_TAGS`` tokens stay in the text (``final_part`` reads the reasoning's, the
    tool-call parser the calls'). The other special tokens are dropped before a plain decode, as
    ``skip_special_tokens`` drops them."""
    tags = special_tag_ids(tokenizer)
    if not tags:
        return lambda ids: str(tokenizer.decode(list(ids), skip_special_tokens=True))
    dropped = _skipped_ids(tokenizer) - tags
    return lambda ids: str(tokenizer.decode([i for i in ids if int(i) not in dropped], skip_special_tokens=False))


class CompletionDecoding:
    """An engine's ``decode``: ``completion_decoder`` of its ``tokenizer``, built on first use (the
    same rule on every backend, so a completion's text does not depend on where it was sampled)."""

    tokenizer: Any

    def decode(self, ids: Sequence[int]) -> str:
        """Completion text: special tokens dropped, a special ``<think>`` / ``</think>`` or tool-call
        marker kept."""
        return self._decode(ids)

    @functools.cached_property
    def _decode(self) -> Callable[[Sequence[int]], str]:
        return completion_decoder(self.tokenizer)
