"""Multi-turn agents: environments and tools as plugins, tool schemas, calls and their parsing.

``spec`` is what a plugin provides, ``tools`` turns functions into schemas and runs calls safely,
``parsing`` reads calls out of the model's text, ``prompting`` tells the model about its tools
when its chat template does not, ``loading`` resolves ``[environment]`` names,
``threads`` runs plugin code on daemon threads with a time limit. The episode loop itself lives in
``polyrl.agents.episodes``.
"""

from polyrl.agents.parsing import ParsedTurn, parse_tool_calls
from polyrl.agents.prompting import template_ignores_tools, tools_system_prompt, with_tools_prompt
from polyrl.agents.spec import (
    Environment,
    EnvironmentSpec,
    EnvironmentStatus,
    Observation,
    ToolSpec,
    environment_tools,
    reset_environment,
    step_environment,
)
from polyrl.agents.tools import ToolBox, ToolCall, error_message, tool_schema

__all__ = ["Environment", "EnvironmentSpec", "EnvironmentStatus", "Observation", "ParsedTurn", "ToolBox",
           "ToolCall", "ToolSpec", "environment_tools", "error_message", "parse_tool_calls",
           "reset_environment", "step_environment", "template_ignores_tools", "tool_schema",
           "tools_system_prompt", "with_tools_prompt"]
