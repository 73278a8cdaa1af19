"""Telling a model about its tools when its chat template does not.

Templates of tool-trained families render ``tools=`` themselves (see ``polyrl.agents.parsing``).
Others (SmolLM2, Gemma 3, Phi-3, the tiny test models) drop it silently, and the model would never
learn the tools exist. For those the episode puts ``tools_system_prompt(schemas)`` in the system
message: the tool schemas and the Hermes ``<tool_call>`` form, which ``parse_tool_calls`` reads.

Some of those templates cannot show a ``tool`` message either: Gemma 3's raises "Conversation
roles must alternate", Phi-3's drops the role. For them a turn's tool results (and the errors
answering malformed calls) go back as one ``user`` message, ``tool_results_as_user``: each result
between ``<tool_response>`` and ``</tool_response>`` on lines of their own, in call order, as
Qwen2.5's own template renders tool messages (a result's own closing tag quoted, ``quoted_result``). The episode runner decides this once per template,
at setup (``EpisodeRunner.check_tool_results``), and refuses a template that shows neither.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.agents.tools import quoted_result

Message = Mapping[str, Any]


def tools_system_prompt(schemas: Sequence[Mapping[str, Any]], fmt: str = "hermes") -> str:
    """Instructions listing ``schemas`` (``tool_schema`` output) and how to call them: the Hermes
    ``<tool_call>`` form, or with ``fmt="json"`` a bare call object at the start of the reply."""
    listing = "\n".join(json.dumps(s, ensure_ascii=False, sort_keys=True) for s in schemas)
    if fmt == "json":  # for small models: one plain line per tool, no schema to imitate
        lines = "\n".join(f"- {_signature(s)}" for s in schemas)
        return (f"You can use these tools:\n{lines}\n"
                'To use one, reply with only {"name": "<tool>", "arguments": {...}}; '
                "its result comes back, then answer.")
    return ("You can call tools. Their JSON schemas, one per line:\n"
            f"<tools>\n{listing}\n</tools>\n"
            "To call one, write a JSON object with the tool's name and its arguments between tags, "
            "one call per block:\n"
            '<tool_call>\n{"name": "<tool name>", "arguments": {"<argument>": <value>}}\n</tool_call>\n'
            "Each result comes back in a message from the tool.")


def _signature(schema: Mapping[str, Any]) -> str:
    """``name(arg: type, ...): description`` from a tool schema."""
    fn = schema.get("function", schema)
    props = fn.get("parameters", {}).get("properties", {})
    args = ", ".join(f"{name}: {spec.get('type', 'any')}" for name, spec in props.items())
    return f"{fn.get('name')}({args}): {fn.get('description', '')}".rstrip(": ")


def template_ignores_tools(encode: Callable[[list[dict[str, Any]], Sequence[Mapping[str, Any]] | None], Sequence[int]],
                           schemas: Sequence[Mapping[str, Any]]) -> bool:
    """True when rendering with ``tools=schemas`` gives the same tokens as without (``encode`` is
    the engine's ``encode_chat(messages, tools)`` with ``add_generation_prompt=True``)."""
    if not schemas:
        return False
    probe = [{"role": "user", "content": "hi"}]
    return list(encode(probe, schemas)) == list(encode(probe, None))


def tool_results_as_user(results: Sequence[Message]) -> list[dict[str, Any]]:
    """A turn's ``tool`` messages as the one ``user`` message a template without a tool role
    renders (one message: Gemma 3 refuses two user turns in a row). A result cannot close its own
    block (``quoted_result``): its text after a ``</tool_response>`` of its own would read as a
    second result (an environment's own ``tool`` messages are quoted here, the tool box's already are)."""
    if not results:
        return []
    body = "\n".join(f"<tool_response>\n{quoted_result(str(m.get('content', '')))}\n</tool_response>"
                      for m in results)
    return [{"role": "user", "content": body}]


def with_tools_prompt(messages: Sequence[Message], schemas: Sequence[Mapping[str, Any]],
                      fmt: str = "hermes") -> list[dict[str, Any]]:
    """``messages`` with the tools prompt added to the system message (or a new one first)."""
    prompt = tools_system_prompt(schemas, fmt)
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content') or ''}\n\n{prompt}".strip()
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out
