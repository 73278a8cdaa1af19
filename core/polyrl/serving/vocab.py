"""How many token ids the served model can embed: the bound every token-id prompt is checked against.

Why check at all: an id past the embedding table is an index error inside the backend (a 500, or
on some devices a read of memory that is not the table), and a negative one silently wraps around
to another row. The model's ``config.json`` says how many rows the table has; a GGUF file or a
folder without one falls back to the tokenizer's length, which is never larger in practice.
"""

from __future__ import annotations

import json
import os
from typing import Any


def embedding_rows(model_path: str, tokenizer: Any | None) -> int | None:
    """The model's vocabulary size (embedding rows), or None when neither source says."""
    config = os.path.join(model_path, "config.json") if model_path else ""
    if config and os.path.isfile(config):
        try:
            with open(config, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        for table in (data, data.get("text_config") or {}):
            rows = table.get("vocab_size") if isinstance(table, dict) else None
            if isinstance(rows, int) and not isinstance(rows, bool) and rows > 0:
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
    config = os.path.join(model_path, "config.json") if model_path else ""
    if not (config and os.path.isfile(config)):
        return None
    try:
        with open(config, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    for table in (data, data.get("text_config") or {}) if isinstance(data, dict) else ():
        for key in _POSITION_KEYS:
            value = table.get(key) if isinstance(table, dict) else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None
