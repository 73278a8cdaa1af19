"""From ``[environment]`` names to tool functions and an environment factory, with config errors.

A tool is a registered name (``polyrl environments`` lists them), ``"package.module:function"``
or ``"path/to/file.py:function"`` (imported as reward functions are). An environment is a
registered name or ``"module:factory"`` / ``"file.py:factory"`` where ``factory(options)`` returns
an environment (a class taking the options works). Every bad entry is a ``ConfigError`` naming
the field and the fix, raised before any model loads.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polyrl.agents.spec import EnvironmentSpec
from polyrl.agents.tools import tool_schema
from polyrl.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from polyrl.registry import Registry

TOOLS_FIELD = "environment.tools"
ENVIRONMENT_FIELD = "environment.name"


def _load_object(spec: str, field: str, what: str) -> Any:
    from polyrl.rewards.functions import _import_file, _import_module

    target, attr = spec.rsplit(":", 1)
    if not target or not attr:
        raise ConfigError(f"{what} {spec!r} has an empty module or name part", field=field,
                          fix='write "package.module:function" or "path/to/file.py:function"')
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    module = _import_file(Path(target), spec, field) if is_file else _import_module(target, spec, field)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise ConfigError(f"{target!r} has no attribute {attr!r} (from {spec!r})", field=field,
                              fix=f"use one of: {', '.join(public) or 'no public callables found'}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"{spec!r} is a {type(obj).__name__}, not a function", field=field,
                          fix=f"point at a {what}")
    return obj


def _renamed(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` under the registered ``name`` (the name the model calls and the schema shows)."""
    if getattr(fn, "__name__", None) == name:
        return fn
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def tool(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def tool(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)
    tool.__name__ = tool.__qualname__ = name
    return tool


def resolve_tools(names: Sequence[str], registry: Registry) -> list[Callable[..., Any]]:
    """The functions ``[environment] tools`` names, each with a valid schema, in order."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError(f"tools must be a list of names, got {names!r}", field=TOOLS_FIELD,
                          fix='e.g. tools = ["calculator", "my_tools.py:lookup"]')
    registered = registry.tools_by_name()
    statuses = {s.name: s for s in registry.environment_statuses() if s.kind == "tool"}
    out: list[Callable[..., Any]] = []
    seen: set[str] = set()
    for i, entry in enumerate(names):
        field = f"{TOOLS_FIELD}[{i}]"
        if not isinstance(entry, str) or not entry.strip():
            raise ConfigError(f"tool entry {entry!r} is not a name", field=field,
                              fix='give a registered tool name or "module:function"')
        entry = entry.strip()
        if entry in registered or (":" not in entry and entry in statuses):
            status = statuses[entry]
            if not status.available:
                hint = f" ({status.install_hint})" if status.install_hint else ""
                raise ConfigError(f"tool {entry!r} cannot run here: {status.reason}", field=field,
                                  fix=f"install what it needs{hint}, or drop it from the list")
            fn = _renamed(registered[entry].function, entry)
        elif ":" in entry:
            fn = _load_object(entry, field, "tool function")
        else:
            known = ", ".join(sorted(registered)) or "none"
            raise ConfigError(f"unknown tool {entry!r} (registered: {known}){_failed_plugins(registry)}",
                              field=field,
                              fix='pick a registered tool (`polyrl environments`), or name your own as '
                                  '"package.module:function" or "path/to/file.py:function"')
        try:
            name = tool_schema(fn)["function"]["name"]
        except ConfigError as exc:
            raise ConfigError(exc.message, field=field, fix=exc.fix) from None
        if name in seen:
            raise ConfigError(f"two tools are named {name!r}", field=field,
                              fix="list each tool once; rename one of two functions that share a name")
        seen.add(name)
        out.append(fn)
    return out


def resolve_environment(name: str, registry: Registry) -> EnvironmentSpec:
    """The spec of the environment ``[environment] name`` names (registered or "module:factory")."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"environment name {name!r} is not a name", field=ENVIRONMENT_FIELD,
                          fix='e.g. name = "guess_number" (`polyrl environments` lists them)')
    name = name.strip()
    registered = registry.environments_by_name()
    statuses = {s.name: s for s in registry.environment_statuses() if s.kind == "environment"}
    if name in statuses:
        status = statuses[name]
        if not status.available:
            hint = f" ({status.install_hint})" if status.install_hint else ""
            raise ConfigError(f"environment {name!r} cannot run here: {status.reason}", field=ENVIRONMENT_FIELD,
                              fix=f"install what it needs{hint}, or pick another environment")
        return registered[name]
    if ":" in name:
        factory = _load_object(name, ENVIRONMENT_FIELD, "factory taking the options and returning an environment")
        _refuse_trl_environment(factory, name)
        return EnvironmentSpec(name=name, create=factory, summary="loaded from " + name)
    known = ", ".join(sorted(registered)) or "none"
    raise ConfigError(f"unknown environment {name!r} (registered: {known}){_failed_plugins(registry)}",
                      field=ENVIRONMENT_FIELD,
                      fix='pick a registered environment (`polyrl environments`), or name your own as '
                          '"package.module:factory" or "path/to/file.py:factory"')


def _refuse_trl_environment(factory: Any, name: str) -> None:
    """A class with ``reset`` and no ``step`` is TRL's ``environment_factory`` shape (``reset(**row)``
    returning text for the prompt, its public methods as tools, ``get_reward()``): polyrl would call
    it with the options dict and then find no ``step``, so say what to write instead, before any
    model loads."""
    if not isinstance(factory, type) or not callable(getattr(factory, "reset", None)) or hasattr(factory, "step"):
        return
    raise ConfigError(
        f"environment {name!r} is the class {factory.__name__} with reset but no step: TRL's environment_factory "
        "shape (reset(**row), public methods as tools, get_reward), which a TOML config does not run as is",
        field=ENVIRONMENT_FIELD,
        fix="point at a factory create(options) returning an environment with reset(row) -> the first messages, "
            "step(message) -> polyrl.agents.Observation(messages, reward, done) and a tools list of its methods "
            '(README: "Environments and tools"), or train the class as it is from Python: '
            f"polyrl.trl.GRPOTrainer(..., environment_factory={factory.__name__})")


#: Where an environment or tool plugin's failure is recorded (its import, or a register hook).
_PLUGIN_GROUPS = ("polyrl.environments", "polyrl_register_environments", "polyrl_register_tools")


def _failed_plugins(registry: Registry) -> str:
    """The environment/tool plugins that failed to load, for an "unknown name" error: the name
    asked for is often one of theirs, and "unknown" alone hides that it is installed but broken."""
    failed = [e for e in registry.load_errors if e.group in _PLUGIN_GROUPS and "registered by" not in e.error]
    if not failed:
        return ""
    shown = "; ".join(f"{e.name!r} ({e.distribution or 'unknown distribution'}): {' '.join(e.error.split())}"
                      for e in failed[:3])
    more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"; environment plugins that failed to load: {shown}{more} (`polyrl environments` lists them)"


__all__ = ["resolve_environment", "resolve_tools"]
