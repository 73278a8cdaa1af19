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
