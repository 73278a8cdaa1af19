"""How many token ids the served model can embed: the bound every token-id prompt is checked against.

Why check at all: an id past the embedding table is an index error inside the backend (a 500, or
on some devices a read of memory that is not the table), and a negative one silently wraps around
to another row. The model's ``config.json`` says how many rows the table has; a GGUF file or a
folder without one falls back to the tokenizer's length, which is never larger in practice.
"""

from __future__ import annotations

from typing import Any

from polyrl.model_config import config_tables, first_positive_int


def embedding_rows(model_path: str, tokenizer: Any | None) -> int | None:
    """The model's vocabulary size (embedding rows), or None when neither source says."""
    rows = first_positive_int(config_tables(model_path), ("vocab_size",))
    if rows is not None:
        return rows
    if tokenizer is not None:
        try:
            return len(tokenizer)
        except TypeError:
            return None
    return None


#: config.json keys naming how many positions a model has (Llama/Qwen's, GPT-2's, older GPTs')
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx")


def model_positions(model_path: str) -> int | None:
    """The positions the model's ``config.json`` says it has, or None when it does not say. Why: a
    prompt past them is an index error inside the backend with absolute position embeddings
    (GPT-2: a 500, a device-side assert on CUDA) and text the model never learnt with RoPE."""
    return first_positive_int(config_tables(model_path), _POSITION_KEYS)
