"""Control characters the model's tokenizer cannot encode, in the text a run's setup adds to every prompt.

Why: the prompt check (``polyrl.control_chars``) reads the dataset's rows and the episodes ask
what environments and tools answer (``polyrl.agents.control_text``), but the text the run itself
renders around them was read by no one: a tool's schema (its docstring, shown through the chat
template's ``tools=`` or the system message teaching the tools, where ``tool_format = "json"``
writes each description as is), ``data.system_prompt`` (the system message of every chat prompt:
refused, but as row 0 of the data file, with a ``tr`` command for that file) and the text values
of ``model.chat_template_kwargs`` (a variable the template writes into every rendering). A U+0004
in a tool's docstring was an ``<|endoftext|>`` in every episode's first prompt, with nothing said.
They are the run's, not an episode's: asked once, at startup, of the run's one ``ControlProbe``,
and refused as a prompt is, naming the tool or the key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from polyrl.control_chars import ControlProbe

if TYPE_CHECKING:
    from polyrl.agents.setup import EnvironmentPlan
    from polyrl.config import RunConfig

#: a schema's text is the tool's code (its docstring, its name): the fix is there
TOOL_FIX = "remove it from the tool's docstring (a schema's descriptions are read from it)"


def check_tool_schemas(probe: ControlProbe | None, schemas: Sequence[Mapping[str, Any]], field: str,
                       owner: str = "") -> None:
    """A ConfigError on ``field`` for the first tool whose schema (``ToolBox.schemas``) holds a
    character ``probe`` says the tokenizer misreads, naming the tool (``owner``: whose tools they
    are, e.g. ``environment 'x': ``), where in its schema, and the character."""
    if probe is None:
        return
    for schema in schemas:
        function = schema.get("function", schema)
        found = probe.find(function)
        if found is not None:
            raise probe.error(f"{owner}tool {function.get('name')!r}, in every episode's first prompt", "its schema",
                              found, field=field, fix=TOOL_FIX)


def check_config_text(probe: ControlProbe | None, system_prompt: str | None, template_kwargs: Mapping[str, Any],
                      kwargs_field: str = "model.chat_template_kwargs") -> None:
    """A ConfigError naming ``data.system_prompt`` or the chat template variable (given as
    ``kwargs_field``) holding a character ``probe`` says the tokenizer misreads (either is in
    every prompt)."""
    if probe is None:
        return
    if system_prompt is not None and (found := probe.find(system_prompt)) is not None:
        raise probe.error("data.system_prompt", "the system message every chat prompt opens with", found,
                          field="data.system_prompt", fix="remove it from data.system_prompt")
    for name, value in template_kwargs.items():
        if (found := probe.find(value)) is not None:
            raise probe.error(kwargs_field, f"variable {name!r}", found, field=kwargs_field,
                              fix=f"remove it from variable {name!r} of {kwargs_field}")


def check_setup_text(probe: ControlProbe | None, config: RunConfig, plan: EnvironmentPlan | None) -> None:
    """The run's own text, once: ``data.system_prompt``, ``model.chat_template_kwargs``, the
    ``[environment] tools``' schemas and those of the tools the environment offers (as its
    setup check made one: ``EnvironmentPlan.own_schemas``)."""
    check_config_text(probe, config.data.system_prompt, config.model.chat_template_kwargs)
    if plan is None:
        return
    if plan.toolbox is not None:
        check_tool_schemas(probe, plan.toolbox.schemas, "environment.tools")
    check_tool_schemas(probe, plan.own_schemas, "environment.name", owner=f"environment {config.environment.name!r}: ")


__all__ = ["TOOL_FIX", "check_config_text", "check_setup_text", "check_tool_schemas"]
