"""Tools handed over as Python functions (TRL's ``GRPOTrainer(tools=[f, g])``), not by name.

Why a plugin: ``[environment] tools`` names registered tools, so the functions are registered by
an in-memory plugin (``GivenTools``, as ``function_reward_plugin`` does for reward functions) under
the names the model calls, their ``__name__`` (TRL's naming), and the run names them. From there
they are polyrl's tools like any other: schemas from type hints and docstrings, each call on a
guarded thread of its own within ``tool_timeout_s``, results as ``tool`` messages.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from polyrl.agents.spec import ToolSpec
from polyrl.agents.tools import tool_schema
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl


class GivenTools:
    """A plugin registering ``functions`` as tools under ``names`` (their schemas' names)."""

    __name__ = "polyrl-given-tools"  # the plugin manager's name for it

    def __init__(self, functions: Sequence[Callable[..., Any]], names: Sequence[str], where: str) -> None:
        self.functions = list(functions)
        self.names = list(names)
        self.where = where

    @hookimpl
    def polyrl_register_tools(self, register: Callable[[ToolSpec], None]) -> None:
        for fn, name in zip(self.functions, self.names):
            doc = (inspect.getdoc(fn) or "").strip().splitlines()
            register(ToolSpec(name=name, function=fn, summary=doc[0] if doc else "", distribution=self.where))


def given_tools(tools: Any, field: str = "tools", taken: Sequence[str] = ()) -> GivenTools:
    """``tools`` checked as the model will be told about them: a list of functions, each with a
    schema (type hints and an ``Args:`` docstring, as transformers' ``get_json_schema`` needs), no
    two with one name, none named as a tool polyrl registers itself (``taken``). Every problem is
    one ``ConfigError`` naming ``field[i]``, before any model loads."""
    if callable(tools) or isinstance(tools, (str, bytes)) or not isinstance(tools, (list, tuple)):
        raise ConfigError(f"{field} is {type(tools).__name__}, not a list of functions", field=field,
                          fix=f"pass {field}=[f, g] (plain or async def functions, or bound methods)")
    seen: dict[str, int] = {}
    for i, fn in enumerate(tools):
        where = f"{field}[{i}]"
        if not callable(fn) or isinstance(fn, type):
            raise ConfigError(f"{where} is {type(fn).__name__ if not isinstance(fn, type) else 'a class'}, not a "
                              "function", field=where, fix="pass plain or async def functions (or bound methods)")
        try:
            name = tool_schema(fn)["function"]["name"]
        except ConfigError as exc:
            raise ConfigError(exc.message, field=where, fix=exc.fix) from None
        if name in seen:
            raise ConfigError(f"{where} and {field}[{seen[name]}] are both named {name!r}; the model calls a tool "
                              "by its name", field=where, fix="rename one of the two functions")
        if name in taken:
            raise ConfigError(f"{where} is named {name!r}, as polyrl's built-in tool is", field=where,
                              fix=f"rename the function (polyrl registers {name!r} itself)")
        seen[name] = i
    return GivenTools(tools, list(seen), where=f"GRPOTrainer({field}=...)")


__all__ = ["GivenTools", "given_tools"]
