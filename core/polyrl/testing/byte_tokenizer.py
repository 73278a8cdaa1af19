"""A byte-level tokenizer written as a ``tokenizer.json`` with nothing but the standard library.

Why: ``build_tiny_model`` trains a BPE with the ``tokenizers`` package, which is not a core
dependency; a backend author who wants a tiny model folder without it (or without torch) gets
one whose tokenizer has no merges: one token per byte, plus the special tokens. Every loader
that reads ``tokenizer.json`` (``transformers``, ``mlx_lm``, MAX) reads it as a BPE model with
the GPT-2 byte-to-character table, exactly as a trained byte-level BPE is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from polyrl.byte_level import byte_to_char


def vocab_size(special_tokens: Sequence[str]) -> int:
    return len(special_tokens) + 256


def byte_level_tokenizer_json(special_tokens: Sequence[str]) -> dict[str, Any]:
    """The ``tokenizer.json`` document: special tokens get ids 0..k-1, byte b gets id k + b."""
    vocab = {tok: i for i, tok in enumerate(special_tokens)}
    for b, ch in byte_to_char().items():
        vocab[ch] = len(special_tokens) + b
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, tok in enumerate(special_tokens)
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": []},
    }
