"""Control characters the model's tokenizer cannot encode, in the text an episode inserts.

Why: the startup check (``polyrl.control_chars``) reads the dataset's prompts only. An
environment's first messages and observations and a tool's results arrive per episode and are
encoded into the next turn's ids, never re-read: SmolLM2's U+0004 became an ``<|endoftext|>`` in
the middle of the conversation the policy was trained on, with nothing said. Each is asked of the
run's one ``ControlProbe``, as a prompt is; what the tokenizer encodes as itself passes unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.control_chars import ControlProbe

#: an environment's text is its code's, not a file's: the fix is there
ENVIRONMENT_FIX = "have the environment leave it out of its messages, or write what it stands for"


def environment_misread(probe: ControlProbe | None, environment: str, when: str,
                        messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Why an environment's ``messages`` (written ``when``: at its reset, in a step) cannot be
    inserted: the first holding, in one of its text values (content, name...), a character
    ``probe`` says the tokenizer misreads, named with its message, role and position; or None."""
    if probe is None:
        return None
    for i, message in enumerate(messages):
        found = probe.find({k: v for k, v in message.items() if isinstance(v, str)})
        if found is not None:
            error = probe.error(f"environment {environment!r}, {when}", f"message {i} ({message.get('role')!r})",
                                found, field="environment", fix=ENVIRONMENT_FIX)
            return f"{error.message}. Fix: {error.fix}"
    return None


def tool_result_misread(probe: ControlProbe | None, result: Mapping[str, Any]) -> str | None:
    """What the model reads instead of a tool's ``result`` (a ``tool`` message) whose content holds
    a character ``probe`` says the tokenizer misreads, or None. A tool's failure is an error the
    model reads, and so is this one: the python tool prints what the model asks (``chr(4)``), so
    ending the episode unscored would let a policy escape its reward."""
    content = result.get("content")
    found = probe.find(content) if probe is not None and isinstance(content, str) else None
    if probe is None or found is None:
        return None
    error = probe.error(f"tool {result.get('name')!r}", "its result", found, field="environment")
    return f"{error.message}; the result is not shown"


__all__ = ["ENVIRONMENT_FIX", "environment_misread", "tool_result_misread"]
