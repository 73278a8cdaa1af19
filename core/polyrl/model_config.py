"""A model folder's ``config.json`` read without loading the model: its family and sizes.

Why one reader: the registry (which backends support this family), peft's per-family LoRA targets
and the server's token-id and length bounds all ask the same file, and each must treat a missing,
unreadable or non-object file the same way (as "the file does not say"), leaving the real error
to the backend's loader.
"""

from __future__ import annotations

import json
import os
from typing import Any


def config_tables(model_path: str | None) -> list[dict[str, Any]]:
    """The model's ``config.json`` object and its ``text_config`` (multimodal models keep the text
    model's sizes there); empty when there is no readable object (a GGUF file, a name)."""
    config = os.path.join(model_path, "config.json") if model_path else ""
    if not (config and os.path.isfile(config)):
        return []
    try:
        with open(config, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict):
        return []
    text_config = data.get("text_config")
    return [data, text_config] if isinstance(text_config, dict) else [data]


def model_type_of(model_path: str | None) -> str | None:
    """The HF ``model_type`` in ``<model_path>/config.json``; None for GGUF files, aliases and
    folders without a readable config (the backend's loader reports those)."""
    tables = config_tables(model_path)
    value = tables[0].get("model_type") if tables else None
    return value if isinstance(value, str) else None


def first_positive_int(tables: list[dict[str, Any]], keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` holding a positive integer (not a bool), table by table."""
    for table in tables:
        for key in keys:
            value = table.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None
