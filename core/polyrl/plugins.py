"""Finding and loading plugins: entry points, allow/deny lists, and broken-plugin isolation.

Plugins come from entry points in groups ``polyrl.backends``, ``polyrl.rewards``,
``polyrl.trackers`` and ``polyrl.environments`` (environments and tools), plus the core's built-in
trackers, its built-in tools and environment (``polyrl.agents.builtin``), the
core's built-in reward plugins (``BUILTIN_REWARD_PLUGINS``: the simple rewards, the LLM judge, the
sandboxed code reward and reward models; none imports torch or httpx until it is used) and any
object passed to ``get_plugin_manager(extra=...)``.
A plugin whose distribution requires another polyrl version, one that fails to import, or one that
marks a function ``@hookimpl`` under a name that is no hook (a misspelling), is recorded in
``load_errors`` (with its entry point, distribution and the fix) and left out instead of taking
every command down; ``polyrl backends`` and ``polyrl doctor`` show those errors.

Environment:
    POLYRL_LOAD_PLUGINS     comma-separated entry-point names: load only these ("" loads none)
    POLYRL_DISABLE_PLUGINS  comma-separated entry-point names never to load

A name in either list that matches no installed entry point (a typo: ``POLYRL_DISABLE_PLUGINS=mxa``
left ``max`` loaded without a word) is warned about once, naming the installed entry points, and
kept in ``env_warnings`` for ``polyrl doctor``; a POLYRL_LOAD_PLUGINS whose names all match none
(it would load no plugin at all) is a ConfigError instead.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable
from importlib import metadata
from types import ModuleType
from typing import Any

import attrs
import pluggy

from polyrl import hookspecs
from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.plugin_calls import LIMIT_ENV, PluginCallTimedOut, call_limited, limit_s, shown
from polyrl.plugin_requirements import unmet_core_requirement
from polyrl.plugin_shapes import argument_problem, class_problem

ENTRY_POINT_GROUPS = ("polyrl.backends", "polyrl.rewards", "polyrl.trackers", "polyrl.environments")
#: polyrl's own distributions: a plugin may override one of their reward names (with a warning).
FIRST_PARTY_DISTRIBUTIONS = frozenset({"polyrl", "polyrl-torch", "polyrl-max", "polyrl-mlx"})


def install_hint(backend: str) -> str:
    """How to install backend ``backend``: polyrl's extra for its own, else its distribution."""
    if backend in ("torch", "max", "mlx"):
        return f"`pip install polyrl[{backend}]`"
    return f"`pip install` the distribution that provides {backend!r}"

#: The core's own reward plugins: (registered name, module).
BUILTIN_REWARD_PLUGINS = (
    ("polyrl-builtin-rewards", "polyrl.rewards.builtin"),
    ("polyrl-llm-judge", "polyrl.rewards.judge"),
    ("polyrl-code-reward", "polyrl.rewards.code"),
)
#: The core's own backend: rollouts from OpenAI-compatible servers (no compute library needed).
BUILTIN_BACKEND_PLUGINS = (("polyrl-remote", "polyrl.remote"),)
#: The core's own trackers (TensorBoard, W&B, MLflow, trackio; each library imported only when used).
BUILTIN_TRACKER_PLUGINS = (("polyrl-builtin-trackers", "polyrl.tracking.builtin"),)
#: The core's own tools (calculator, sandboxed python) and environment (guess_number).
BUILTIN_ENVIRONMENT_PLUGINS = (("polyrl-builtin-environments", "polyrl.agents.builtin"),)
#: The core's own model alias (``tiny-llama``: built with numpy + tokenizers, loaded by every backend).
BUILTIN_MODEL_PLUGINS = (("polyrl-tiny-models", "polyrl.testing.aliases"),)
#: The registration names of all of the above.
BUILTIN_NAMES = frozenset(name for name, _ in (*BUILTIN_REWARD_PLUGINS, *BUILTIN_BACKEND_PLUGINS,
                                               *BUILTIN_TRACKER_PLUGINS, *BUILTIN_ENVIRONMENT_PLUGINS,
                                               *BUILTIN_MODEL_PLUGINS))
ALLOW_ENV = "POLYRL_LOAD_PLUGINS"
DENY_ENV = "POLYRL_DISABLE_PLUGINS"


@attrs.define(frozen=True)
class PluginLoadError:
    """A plugin that could not be loaded: which one, from where, and why."""

    name: str
    group: str
    distribution: str
    error: str
    traceback: str = ""

    @classmethod
    def caught(cls, name: str, group: str, distribution: str, exc: BaseException, fix: str) -> PluginLoadError:
        """The error ``exc`` a plugin raised, with the traceback being handled (call it in the
        ``except`` block): a broken plugin is listed, never raised. ``fix`` ends it (unless the
        plugin's own error already says ``Fix:``), as every other load error ends."""
        kind, text = type(shown(exc)).__name__, str(exc)
        # a bare ``raise KeyboardInterrupt`` was listed as "KeyboardInterrupt: ", a reason with nothing after it
        error = f"{kind}: {text}" if text.strip() else f"{kind} (raised with no message)"
        if "Fix:" not in error:
            error = f"{error}. Fix: {fix}"
        return cls(name=name, group=group, distribution=distribution, error=error, traceback=traceback.format_exc())


def import_fix(ep: metadata.EntryPoint, distribution: str, exc: BaseException) -> str:
    """How to get past a plugin whose module failed at import (``ImportError``, ``SyntaxError``,
    anything its module code raised). Why: "ModuleNotFoundError: No module named 'x'" alone, unlike
    every other load error, said neither whose fault it was nor that polyrl runs without it."""
    who = distribution or f"the distribution of entry point {ep.name!r}"
    off = f"or disable it with {DENY_ENV}={ep.name} (polyrl runs without it)"
    if isinstance(exc, PluginCallTimedOut):
        return f"raise {LIMIT_ENV} if its import is only slow, else report the hang to {who}'s authors, {off}"
    error = shown(exc)
    module = ep.value.split(":")[0].strip()
    if isinstance(error, ModuleNotFoundError) and error.name and not (module + ".").startswith(error.name + "."):
        return f"install {error.name.split('.')[0]!r}, which {who} imports, or reinstall {who}, {off}"
    return f"reinstall or upgrade {who} (one made for this Python and polyrl), report it to its authors, {off}"


@attrs.define(frozen=True)
class PluginInfo:
    name: str
    group: str
    distribution: str
    version: str


#: env-list warnings already logged in this process (the registry is rebuilt; the warning is said once)
_WARNED: set[str] = set()


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in sorted(names))


def _split_env(name: str) -> set[str] | None:
    value = os.environ.get(name)
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _entry_points(group: str) -> Iterable[metadata.EntryPoint]:
    return metadata.entry_points(group=group)


def _dist_of(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "", ""
    return dist.metadata["Name"] or "", dist.version or ""


def _no_hooks(ep: metadata.EntryPoint, plugin: Any) -> str:
    """Why an entry point whose object implements no hook is not loaded. Why say it: one naming the
    package (``mypkg``) instead of the module holding the hooks (``mypkg.plugin``) was loaded and
    silently added nothing, and a run naming its backend was told to install what is installed."""
    what = f"module {plugin.__name__!r}" if isinstance(plugin, ModuleType) else f"{type(plugin).__name__} {plugin!r:.40}"
    return (f"entry point {ep.name} = {ep.value} loads {what}, which implements no polyrl hook, so it adds "
            f"nothing. Fix: point the entry point at the module or object holding the @hookimpl functions "
            f"(e.g. {ep.value.split(':')[0]}.plugin), or report it to the plugin's authors")


class PolyrlPluginManager(pluggy.PluginManager):
    """A pluggy manager that also remembers where each plugin came from and what failed."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.load_errors: list[PluginLoadError] = []
        self.plugin_info: dict[str, PluginInfo] = {}
        #: names in POLYRL_LOAD_PLUGINS / POLYRL_DISABLE_PLUGINS that match no installed entry point
        self.env_warnings: list[str] = []

    def distribution_of(self, plugin: Any) -> str:
        name = self.get_name(plugin)
        info = self.plugin_info.get(name or "")
        return info.distribution if info else "polyrl"

    def version_of(self, plugin: Any) -> str:
        """The version of the distribution ``plugin`` came from (polyrl's for a built-in)."""
        info = self.plugin_info.get(self.get_name(plugin) or "")
        if info is not None:
            return info.version
        from polyrl import __version__

        return __version__

    def hook_fix(self, plugin_name: str, exc: BaseException) -> str:
        """How to get past plugin ``plugin_name`` whose register hook raised ``exc`` or hung."""
        info = self.plugin_info.get(plugin_name)
        if info is not None:  # an entry point: it can be disabled ("name@dist" when two share the name)
            name = plugin_name.split("@")[0]
            who, off = f"{info.distribution or name}'s authors", f", or disable it with {DENY_ENV}={name}"
        elif plugin_name in BUILTIN_NAMES:
            who, off = "polyrl's authors (a built-in plugin)", ""
        else:
            return "fix the plugin object passed to get_plugin_manager(extra=...)"
        if isinstance(exc, PluginCallTimedOut):
            return f"raise {LIMIT_ENV} if it is only slow, else report the hang to {who}{off}"
        return f"report it to {who}{off}"

    def load_entry_points(self) -> None:
        allow, deny = _split_env(ALLOW_ENV), _split_env(DENY_ENV) or set()
        found = {group: list(_entry_points(group)) for group in ENTRY_POINT_GROUPS}
        self._check_env_names(allow, deny, {ep.name for eps in found.values() for ep in eps})
        for group, eps in found.items():
            for ep in eps:
                if ep.name in deny or (allow is not None and ep.name not in allow):
                    continue
                dist, version = _dist_of(ep)
                key = self._registration_name(ep.name, group, dist)
                if key is None:  # this entry point again (a distribution found twice on the path)
                    continue
                conflict = unmet_core_requirement(getattr(ep, "dist", None))
                if conflict:  # pip would have refused it; an editable or --no-deps install does not
                    self.load_errors.append(PluginLoadError(name=ep.name, group=group, distribution=dist,
                                                            error=conflict))
                    continue
                plugin = None
                try:
                    plugin = call_limited(ep.load, f"importing plugin {ep.name!r} ({dist or group})")
                    if plugin is not None and self.is_registered(plugin):  # one module under two groups
                        continue
                    shape = class_problem(self, plugin, ep.name, ep.value)
                    if shape is not None:
                        self.load_errors.append(PluginLoadError(name=ep.name, group=group, distribution=dist,
                                                                error=shape))
                        continue
                    if plugin is not None:  # pluggy reads None as "block this name", without a word
                        self.register(plugin, name=key)
                except pluggy.PluginValidationError as exc:  # pluggy's words name no fix
                    error = argument_problem(self, plugin, ep.name) if plugin is not None else None
                    if error is None:
                        fix = f"report it to the authors of {dist or ep.name}, or disable it with {DENY_ENV}={ep.name}"
                        self.load_errors.append(PluginLoadError.caught(ep.name, group, dist, exc, fix))
                    else:
                        self.load_errors.append(PluginLoadError(name=ep.name, group=group, distribution=dist,
                                                                error=error, traceback=traceback.format_exc()))
                    continue
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin must not break us
                    self.load_errors.append(PluginLoadError.caught(ep.name, group, dist, exc,
                                                                   import_fix(ep, dist, exc)))
                    continue
                if plugin is None or not self.get_hookcallers(plugin):
                    if plugin is not None:
                        self.unregister(plugin)
                    self.load_errors.append(PluginLoadError(name=ep.name, group=group, distribution=dist,
                                                            error=_no_hooks(ep, plugin)))
                    continue
                self.plugin_info[key] = PluginInfo(key, group, dist, version)

    def _check_env_names(self, allow: set[str] | None, deny: set[str], known: set[str]) -> None:
        """Warn about (or refuse) list names that match no installed entry point; why: a typo was
        ignored without a word, so the plugin meant to be disabled still loaded."""
        installed = ", ".join(sorted(known)) or "none"
        if allow and not allow & known:
            raise ConfigError(f"names no installed plugin entry point ({_quoted(allow)}), so no plugin would "
                              f"load", field=ALLOW_ENV,
                              fix=f"use entry-point names from: {installed}; set it to \"\" to load no plugin "
                                  f"on purpose, or unset it to load them all")
        for env, names, effect in ((ALLOW_ENV, allow or set(), "load"), (DENY_ENV, deny, "disable")):
            unknown = names - known
            if not unknown:
                continue
            what = (f"is not the name of an installed plugin entry point, so it {effect}s" if len(unknown) == 1 else
                    f"are not names of installed plugin entry points, so they {effect}")
            text = (f"{env}: {_quoted(unknown)} {what} nothing. Fix: use entry-point names from: {installed} (polyrl's built-in plugins have none "
                    f"and always load)")
            self.env_warnings.append(text)
            if text not in _WARNED:
                _WARNED.add(text)
                get_logger("polyrl.plugins").warning(text)

    def _registration_name(self, name: str, group: str, dist: str) -> str | None:
        """The name a plugin registers under: its entry point's name, or ``name@distribution`` when
        another distribution took that name first (entry-point names are one namespace across
        every installed distribution: two ``plugin = ...`` entries silently dropped the second,
        and a third-party reward entry named ``reward_model`` hid polyrl-torch's). None: the same
        entry point seen again."""
        if not self.has_plugin(name):
            return name
        info = self.plugin_info.get(name)
        if info is not None and (info.group, info.distribution) == (group, dist):
            return None
        key = f"{name}@{dist or group}"
        return key if not self.has_plugin(key) else f"{key}/{group}"

    def drop_plugins_with_unknown_hooks(self) -> None:
        """Unregister each plugin with an ``@hookimpl`` that matches no hook, recording why.

        Why: pluggy's ``check_pending`` raises on the first such plugin, so one misspelt hook in
        one installed distribution would break every polyrl command with a traceback.
        """
        known = sorted(n for n in vars(self.hook) if not n.startswith("_") and getattr(self.hook, n).has_spec())
        bad: dict[str, list[str]] = {}
        for hook_name, caller in list(vars(self.hook).items()):
            if hook_name.startswith("_") or caller.has_spec():
                continue
            for impl in caller.get_hookimpls():
                if not impl.optionalhook:
                    bad.setdefault(impl.plugin_name, []).append(hook_name)
        for name, hooks in bad.items():
            info = self.plugin_info.pop(name, None)
            self.unregister(name=name)
            unknown = ", ".join(repr(h) for h in sorted(hooks))
            self.load_errors.append(PluginLoadError(
                name=name,
                group=info.group if info else "extra",
                distribution=info.distribution if info else "",
                error=(f"plugin {name!r} implements unknown hook(s) {unknown} (a misspelt @hookimpl?); "
                       f"it was not loaded. Fix: rename to one of {', '.join(known)} "
                       f"(see polyrl.hookspecs), or disable it with {DENY_ENV}={name}"),
            ))


def get_plugin_manager(extra: Iterable[Any] = (), entry_points: bool = True) -> PolyrlPluginManager:
    """A fresh plugin manager with the built-ins, entry-point plugins and ``extra`` registered."""
    import importlib

    limit_s()  # a bad POLYRL_PLUGIN_TIMEOUT_S: one error now, not a load error on every plugin
    pm = PolyrlPluginManager()
    for name, module in (*BUILTIN_REWARD_PLUGINS, *BUILTIN_BACKEND_PLUGINS, *BUILTIN_TRACKER_PLUGINS,
                         *BUILTIN_ENVIRONMENT_PLUGINS, *BUILTIN_MODEL_PLUGINS):
        pm.register(importlib.import_module(module), name=name)
    if entry_points:
        pm.load_entry_points()
    for i, plugin in enumerate(extra):
        pm.register(plugin, name=getattr(plugin, "__name__", None) or f"extra-{i}")
    pm.drop_plugins_with_unknown_hooks()
    pm.check_pending()  # nothing left to find: kept as a guard
    return pm
