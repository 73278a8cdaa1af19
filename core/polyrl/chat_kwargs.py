"""``model.chat_template_kwargs``: extra variables for the model's chat template (TRL's ``chat_template_kwargs``).

Why: some templates read a switch the caller sets, Qwen3's ``enable_thinking`` above all: with
``enable_thinking=False`` its generation prompt writes an empty ``<think>\\n\\n</think>\\n\\n``, so
the model answers without reasoning. TRL passes ``GRPOConfig.chat_template_kwargs`` to every
``apply_chat_template`` of the policy's prompts; polyrl passes ``model.chat_template_kwargs`` to
every rendering of the policy's chat template (sampling, episodes' turns, evaluation, the startup
prompt-length check, the remote backend's token-id prompts), the same values each time, so an
episode's ids stay one growing prefix.

The values are checked here once: a table of JSON values whose keys are template variables. A key
that is one of ``apply_chat_template``'s own arguments (``tools``, ``add_generation_prompt``...)
is refused: passed as a variable it would collide with the argument (a TypeError in TRL) or
silently change what the caller asked for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from polyrl.errors import ConfigError
from polyrl.validators import shown

#: ``apply_chat_template``'s own arguments and the variables the renderer sets itself
RESERVED = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
    "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
})

_EXAMPLE = 'e.g. chat_template_kwargs = {enable_thinking = false} in [model]'


def _json_problem(value: Any, where: str) -> str | None:
    """Where ``value`` holds something that is not a JSON value, else None."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} is {value!r}, not a finite number"
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            problem = _json_problem(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has the key {shown(key)}, not a string"
            problem = _json_problem(item, f"{where}.{key}")
            if problem:
                return problem
        return None
    return f"{where} is a {type(value).__name__}, not a JSON value"


def checked(value: Any, field: str = "model.chat_template_kwargs", example: str = _EXAMPLE) -> dict[str, Any]:
    """``value`` as a plain dict of template variables; one ConfigError on ``field`` when it is
    not a table of JSON values keyed by variable names (None reads as empty, TRL's default);
    ``example`` ends its fixes, written as the caller writes the value (a TOML line, a flag)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"must be a table of template variables, got {shown(value)}", field=field, fix=example)
    for key in value:
        if not isinstance(key, str) or not key.isidentifier():
            raise ConfigError(f"has the key {shown(key)}, which no chat template can read as a variable",
                              field=field, fix=f"use variable names as keys ({example})")
        if key in RESERVED:
            raise ConfigError(f"sets {key!r}, which is apply_chat_template's own argument, not a template "
                              "variable", field=f"{field}.{key}",
                              fix="remove it (polyrl sets tools and the generation prompt itself)")
    problem = next((p for p in (_json_problem(v, k) for k, v in value.items()) if p), None)
    if problem:
        raise ConfigError(problem, field=field, fix=f"give strings, numbers, booleans, lists or tables ({example})")
    return {str(k): _plain(v) for k, v in value.items()}


def _plain(value: Any) -> Any:
    """A checked JSON value as plain dicts and lists (a tuple becomes a list, as JSON keeps it)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
