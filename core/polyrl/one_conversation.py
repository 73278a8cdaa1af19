"""One conversation passed where a list of prompts is expected: refused, with the call to write.

Why: ``prompts=[{"role": "user", "content": "..."}]`` (a chat, not wrapped in a list of chats) is
a list of dicts, so each message was read as a row of its own, and the error said the rows lacked
a ``prompt`` column and to rename a column: advice for a dataset, not for this slip. The fix here
spells the call out with the roles given, ``prompts=[[{"role": "user", "content": ...}]]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from polyrl.errors import ConfigError

#: the keys a chat message holds (TRL's and the OpenAI format's); a row with any other key is a row
MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content",
                          "thinking"})
#: how ``message_row_fix`` starts (``polyrl.api`` tells it in Python's words)
MESSAGE_ROWS_FIX = "write one conversation per row"
#: the messages of the conversation written out in the fix; more are shown as ``...``
_SHOWN = 3


def _is_message(item: Any) -> bool:
    return isinstance(item, Mapping) and "role" in item and "content" in item and set(item) <= MESSAGE_KEYS


def refuse_one_conversation(prompts: Any, field: str = "prompts") -> None:
    """Raise when ``prompts`` (a list or tuple) holds chat messages only, as one conversation does.
    Rows with a column besides a message's keys (``answer``, ``prompt``) are rows, and pass."""
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(_is_message(p) for p in prompts):
        return
    shown = ", ".join(f'{{"role": {json.dumps(str(m["role"]))}, "content": ...}}' for m in prompts[:_SHOWN])
    more = ", ..." if len(prompts) > _SHOWN else ""
    raise ConfigError(
        f"{field} is one conversation ({len(prompts)} message{'s' if len(prompts) != 1 else ''} with a role and "
        f"content), where a list of prompts is expected: each message would be read as a prompt row of its own",
        field=field,
        fix=f"wrap it in a list, one conversation per prompt: {field}=[[{shown}{more}]] (or as rows, with the columns "
            f"your rewards read: {field}=[{{\"prompt\": [{shown}{more}], \"answer\": ...}}])")


def message_row_fix(row: Mapping[str, Any], column: str) -> str | None:
    """The fix for a data file's row without a prompt that is itself one chat message (a file of
    messages, one per line), or None for any other row. Why: the general fix, naming another column
    as the prompt column, would train on each message's text as a prompt of its own, the
    assistant's answers too."""
    if not _is_message(row):
        return None
    return (f"{MESSAGE_ROWS_FIX}, its messages as a list in column {column!r} and the answer in a "
            f'column of its own: {{"{column}": [{{"role": "user", "content": "..."}}], "answer": "..."}} '
            "(each row here is one message)")


__all__ = ["MESSAGE_KEYS", "MESSAGE_ROWS_FIX", "message_row_fix", "refuse_one_conversation"]
