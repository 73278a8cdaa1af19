"""A CSV prompt cell holding chat messages written as JSON (or Python) text: refused, naming its row.

Why: a CSV cell is text, so ``[{"role": "user", "content": "..."}]`` exported from a DataFrame of
chats (pandas writes a list cell as Python's ``[{'role': ...}]``) reaches the model as that text, verbatim, as a plain prompt (TRL's too), and the chat
template wraps it in a user turn of its own: training runs on prompts no one meant. A prompt that
is such text on purpose is no use case; a JSONL or Parquet file holds real message lists.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from polyrl.errors import ConfigError

#: what a cell of messages starts with, spaces aside: checked with Arrow kernels before any parse
_OPENING = r'''^\s*\[\s*\{\s*["'](role|content)["']'''


def refuse_chat_text(table: Any, column: str, name: str) -> None:
    """Raise naming the first row of ``column`` (text) that parses as a JSON list of objects with
    a ``role`` and a ``content``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column not in table.column_names:
        return
    values = table.column(column)
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return
    hits = pc.match_substring_regex(values, _OPENING)
    if not pc.any(hits).as_py():
        return
    for row in pc.indices_nonzero(pc.fill_null(hits, False)).to_pylist():
        text = values[row].as_py()
        try:
            parsed = json.loads(text)
        except ValueError:
            try:
                parsed = ast.literal_eval(text)  # literals only: never runs code
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
        if isinstance(parsed, list) and parsed and all(isinstance(m, dict) and "role" in m and "content" in m
                                                        for m in parsed):
            raise ConfigError(
                f"row {row} of {name}: column {column!r} holds chat messages written as text, which a CSV cell keeps as "
                "text: the model would read that text itself, as one user message", field="data.path",
                fix="give the rows as JSONL or Parquet, where a prompt can be a list of messages (e.g. "
                    "DataFrame.to_json(orient='records', lines=True)), or write the prompt as plain text")
