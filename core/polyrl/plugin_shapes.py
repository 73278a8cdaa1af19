"""What is wrong with the shape of a loaded plugin object, said before pluggy (or a hook call) says it worse.

Why: an ``@hookimpl`` whose argument names differ from the hookspec's (``def
polyrl_register_backends(reg)``) was listed as pluggy's three-line ``PluginValidationError`` with no
fix, and an entry point naming a class (``mypkg:Plugin``) instead of an instance loaded without a
word, then every one of its register hooks failed with ``missing 1 required positional argument:
'self'``, naming neither the entry point nor the fix.
"""

from __future__ import annotations

import inspect
from typing import Any

import pluggy


def _hookimpl_names(pm: pluggy.PluginManager, plugin: Any) -> list[str]:
    """The attribute names of ``plugin`` marked ``@hookimpl`` for a hook that has a spec."""
    names = []
    for name in dir(plugin):
        try:
            marked = pm.parse_hookimpl_opts(plugin, name) is not None
        except Exception:  # noqa: BLE001 - a property of the plugin raising: pluggy will say it
            continue
        caller = getattr(pm.hook, name, None)
        if marked and caller is not None and caller.has_spec():
            names.append(name)
    return names


def _required(function: Any) -> list[str] | None:
    """The argument names ``function`` needs (positional, no default), or None if unreadable."""
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in kinds and p.default is inspect.Parameter.empty]


def class_problem(pm: pluggy.PluginManager, plugin: Any, entry: str, value: str) -> str | None:
    """Why ``plugin``, a class entry point ``entry = value`` named, cannot be registered as it is, or None (not a
    class, or one whose hooks are all static/class methods, which work unbound)."""
    if not inspect.isclass(plugin):
        return None
    unbound = [name for name in _hookimpl_names(pm, plugin)
               if not isinstance(inspect.getattr_static(plugin, name, None), (staticmethod, classmethod))]
    if not unbound:
        return None
    module = value.split(":")[0]
    return (f"entry point {entry} = {value} names class {plugin.__name__}, not an instance: its @hookimpl method(s) "
            f"{', '.join(sorted(unbound))} would be called without self. Fix: point the entry point at an "
            f"instance (e.g. `plugin = {plugin.__name__}()` in {module}, then {module}:plugin), or report it "
            f"to the plugin's authors")


def argument_problem(pm: pluggy.PluginManager, plugin: Any, name: str) -> str | None:
    """Which ``@hookimpl`` of ``plugin`` (registered as ``name``) takes arguments its hook never
    passes, with the hookspec's names as the fix, or None when every one matches."""
    for hook in _hookimpl_names(pm, plugin):
        spec = getattr(pm.hook, hook).spec
        wanted = set(spec.argnames) | set(spec.kwargnames)
        taken = _required(getattr(plugin, hook))
        if taken is None:
            continue
        unknown = [arg for arg in taken if arg not in wanted]
        if unknown:
            return (f"plugin {name!r} hook {hook} takes argument(s) {', '.join(repr(a) for a in unknown)}, "
                    f"which polyrl never passes (pluggy matches arguments by name); it was not loaded. Fix: "
                    f"name them as the hookspec does, {hook}({', '.join(spec.argnames)}) (any of them, in any "
                    f"order; see polyrl.hookspecs), or report it to the plugin's authors")
    return None
