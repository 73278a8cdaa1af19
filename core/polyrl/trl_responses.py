"""A chat completion as TRL 1.16 hands it to reward functions when its tokenizer has a ``response_schema``.

Why: TRL's ``GRPOTrainer._generate`` parses each chat completion's token ids with the tokenizer's
``response_schema`` (``trl.chat_template_utils.parse_response``) before the rewards see it, so a
reasoning model's ``<think>...</think>`` arrives as ``thinking`` beside a ``content`` without it,
and a tool call as ``tool_calls``. polyrl passed the decoded text as ``content``: a reward
reading ``completion[0]["content"]`` scored the thinking too, with no word.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def response_parser(tokenizer: Any) -> Callable[[list[int]], dict[str, Any]] | None:
    """The parser TRL applies to ``tokenizer``'s chat completions, or None when TRL applies none
    (no ``response_schema``: TRL decodes the text into ``content``, as polyrl does)."""
    schema = None if tokenizer is None else getattr(tokenizer, "response_schema", None)
    if schema is None:
        return None
    _refuse_missing_jmespath(schema)

    def parse(ids: list[int]) -> dict[str, Any]:
        try:
            parsed = tokenizer.parse_response(ids)
            if not isinstance(parsed, dict):  # None: a completion cut so short its content is gone
                raise ValueError("no message parsed")
            eos = tokenizer.eos_token
            if isinstance(parsed.get("content"), str) and eos:
                parsed["content"] = parsed["content"].removesuffix(eos)
            if not parsed.get("content"):
                parsed["content"] = ""
            if "tool_calls" in parsed:
                _check_tool_calls(parsed["tool_calls"])
        except (ValueError, TypeError):  # what TRL falls back on: the text, as without a schema
            parsed = {"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}
        return parsed

    return parse


def _refuse_missing_jmespath(schema: Any) -> None:
    """ConfigError for a schema whose parsers transform with jmespath when it is not installed.
    Why: transformers' parse then raises ImportError, which TRL lets through: its run fails at the
    first completion, polyrl's would after its models loaded."""
    import importlib.util
    import json

    try:
        text = json.dumps(schema)
    except (TypeError, ValueError):
        return
    if '"transform"' in text and importlib.util.find_spec("jmespath") is None:
        from polyrl.errors import ConfigError

        raise ConfigError("the tokenizer's response_schema transforms what it parses with jmespath, which is not "
                          "installed: TRL parses every chat completion with it before the reward functions see "
                          "it, and the parse fails without jmespath", field="processing_class",
                          fix="pip install jmespath, or set the tokenizer's response_schema to None")


def _check_tool_calls(calls: Any) -> None:
    """ValueError for parsed tool calls TRL refuses (then the completion is plain text); a call
    without arguments gets ``{}``, as TRL gives it."""
    if calls is None:
        return
    if not isinstance(calls, list):
        raise ValueError("tool_calls is no list")
    for call in calls:
        if not isinstance(call, dict):
            raise ValueError("a tool call is no dict")
        body = call.get("function", call)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            raise ValueError("a tool call has no name")
        if body.get("arguments") is None:
            body["arguments"] = {}


def folder_has_schema(folder: str | Path) -> bool:
    """Whether the tokenizer saved in ``folder`` has a ``response_schema`` (transformers keeps it in
    ``tokenizer_config.json``): read without loading the tokenizer; False for no such folder."""
    from polyrl.backend_kit.model_folders import json_object

    return json_object(Path(folder) / "tokenizer_config.json").get("response_schema") is not None
