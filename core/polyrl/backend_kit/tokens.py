"""Token-level facts every backend reads from an HF-style tokenizer the same way."""

from __future__ import annotations

from typing import Any


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
