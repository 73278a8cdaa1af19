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
