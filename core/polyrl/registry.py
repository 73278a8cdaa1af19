"""The backend registry: which backends exist, which run here (and why not), what they can do.

    >>> from polyrl.registry import get_registry
    >>> reg = get_registry()
    >>> [s.name for s in reg.statuses() if s.available]
    ['torch']
    >>> engine = reg.load("torch", EngineConfig(model="tiny"))

The same data backs ``polyrl backends [--json]`` and ``polyrl doctor``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from polyrl import hub
from polyrl.agents.spec import EnvironmentSpec, EnvironmentStatus, ToolSpec, probe_status
from polyrl.errors import BackendUnavailable, ConfigError, PluginError, PolyrlError
from polyrl.folder_links import refuse_outside_links
from polyrl.model_config import model_type_of
from polyrl.path_text import check_path_text
from polyrl.plugin_calls import PluginCallTimedOut, call_limited, probe_reason, shown
from polyrl.plugin_specs import registered_by
from polyrl.plugins import (FIRST_PARTY_DISTRIBUTIONS, PluginLoadError, PolyrlPluginManager, get_plugin_manager,
                            install_hint)
from polyrl.tracking.spec import TrackerSpec, TrackerStatus
from polyrl.types import BackendSpec, EngineConfig, RewardSpec


@attrs.define(frozen=True)
class BackendStatus:
    """A backend as ``polyrl backends`` shows it."""

    name: str
    available: bool
    reason: str | None
    version: str
    distribution: str
    summary: str
    install_hint: str
    capabilities: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


class Registry:
    """Backends and rewards announced by the plugins of one plugin manager."""

    def __init__(self, pm: PolyrlPluginManager | None = None) -> None:
        self.pm = pm or get_plugin_manager()
        self._backends: dict[str, BackendSpec] = {}
        self._rewards: dict[str, RewardSpec] = {}
        self._trackers: dict[str, TrackerSpec] = {}
        self._environments: dict[str, EnvironmentSpec] = {}
        self._tools: dict[str, ToolSpec] = {}
        #: (kind, name) -> the plugin that registered it / the distributions that all did
        self._agent_owners: dict[tuple[str, str], Any] = {}
        self._agent_conflicts: dict[tuple[str, str], list[str]] = {}
        self._owners: dict[str, Any] = {}  # backend name -> the plugin object that registered it
        #: backend name -> the distributions that all registered it (unusable until one is removed)
        self._conflicts: dict[str, list[str]] = {}
        self._reward_owners: dict[str, list[Any]] = {}
        self._reward_claims: dict[str, list[str]] = {}  # reward name -> distributions registering it
        self._hung_probes: dict[str, str] = {}  # backend name -> why its probe is not asked again
        self.hook_errors: list[PluginLoadError] = []
        self._collect()
        for name, dists in self._conflicts.items():
            self.hook_errors.append(PluginLoadError(
                name=name, group="polyrl_register_backends", distribution=" and ".join(dists),
                error=self._conflict_text(name)))
        for (kind, name), dists in self._agent_conflicts.items():
            self.hook_errors.append(PluginLoadError(
                name=name, group=f"polyrl_register_{kind}s", distribution=" and ".join(dists),
                error=self._agent_conflict_text(kind, name)))
        for name, dists in self._reward_claims.items():
            if len(dists) > 1 and not all(d in FIRST_PARTY_DISTRIBUTIONS for d in dists[:-1]):
                self.hook_errors.append(PluginLoadError(
                    name=name, group="polyrl_register_rewards", distribution=" and ".join(dists),
                    error=f"reward name {name!r} is registered by {len(dists)} distributions: {', '.join(dists)}; "
                          "a run naming it is refused. Fix: `pip uninstall` all but one of them, or disable the "
                          "others' entry points with POLYRL_DISABLE_PLUGINS"))

    def _conflict_text(self, name: str) -> str:
        dists = self._conflicts[name]
        return (f"backend name {name!r} is registered by {len(dists)} distributions: {', '.join(dists)}; "
                f"polyrl will not guess which one you meant. Fix: `pip uninstall` all but one of them, "
                f"or disable the others' entry points with POLYRL_DISABLE_PLUGINS")

    # --- collection ----------------------------------------------------------------------------

    def _collect(self) -> None:
        # Call each plugin's registration hook separately so one that raises is isolated.
        for hook_name, sink, kind in (
            ("polyrl_register_backends", self._backends, BackendSpec),
            ("polyrl_register_rewards", self._rewards, RewardSpec),
            ("polyrl_register_trackers", self._trackers, TrackerSpec),
            ("polyrl_register_environments", self._environments, EnvironmentSpec),
            ("polyrl_register_tools", self._tools, ToolSpec),
        ):
            caller = getattr(self.pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                dist = self.pm.distribution_of(impl.plugin)
                try:
                    specs = registered_by(impl, hook_name, kind, dist)
                except Exception as exc:  # noqa: BLE001 - a timeout too (PluginCallTimedOut)
                    self.hook_errors.append(PluginLoadError.caught(impl.plugin_name, hook_name, dist, exc,
                                                                   self.pm.hook_fix(impl.plugin_name, exc)))
                    continue
                for spec in specs:
                    self._add(spec, sink, kind, impl.plugin, dist)

    def _add(self, spec: Any, sink: dict[str, Any], kind: type, plugin: Any, dist: str) -> None:
        """Register one spec of a hook that returned (all or nothing: a hook that raises part-way
        leaves no half-registered plugin behind, whose missing pieces would fail later, at run time)."""
        if not spec.distribution:
            spec.distribution = dist
        if kind is BackendSpec and not spec.version:  # the hookspec's example sets none
            spec.version = self.pm.version_of(plugin)
        if kind is BackendSpec and spec.name in sink and self._owners.get(spec.name) is not plugin:
            # Why: "last one wins" would run a different backend than the user chose.
            dists = self._conflicts.setdefault(spec.name, [sink[spec.name].distribution or "?"])
            dists.append(spec.distribution or "?")
            return
        if kind in (EnvironmentSpec, ToolSpec, TrackerSpec) and self._agent_conflict(spec, sink, plugin):
            return
        if kind is RewardSpec:
            self._claim_reward(spec, plugin)
        sink[spec.name] = spec
        if kind is BackendSpec:
            self._owners[spec.name] = plugin

    def _claim_reward(self, spec: RewardSpec, plugin: Any) -> None:
        """Who registered reward ``spec.name``, in order (the last one scores; ``RewardComputer``
        warns when it replaces one of polyrl's own and refuses two third-party ones)."""
        owners = self._reward_owners.setdefault(spec.name, [])
        if plugin not in owners:
            owners.append(plugin)
            self._reward_claims.setdefault(spec.name, []).append(spec.distribution or "?")

    def _agent_conflict(self, spec: EnvironmentSpec | ToolSpec | TrackerSpec, sink: dict[str, Any],
                        plugin: Any) -> bool:
        """Record an environment/tool/tracker name claimed by two plugins (True: do not register it)."""
        kind = ("environment" if isinstance(spec, EnvironmentSpec) else "tool" if isinstance(spec, ToolSpec)
                else "tracker")
        key = (kind, spec.name)
        owner = self._agent_owners.setdefault(key, plugin)
        if owner is plugin:
            return False
        dists = self._agent_conflicts.setdefault(key, [sink[spec.name].distribution or "?"])
        dists.append(spec.distribution or "?")
        return True

    def _agent_conflict_text(self, kind: str, name: str) -> str:
        dists = self._agent_conflicts[(kind, name)]
        if kind == "tracker":  # the first keeps it: the core's trackers load first, so none is replaced
            return (f"tracker name {name!r} is registered by {len(dists)} distributions: {', '.join(dists)}; "
                    f"the first ({dists[0]}) keeps it and the others' are ignored. Fix: rename the tracker "
                    f"in the later plugin, `pip uninstall` it, or disable its entry point with "
                    f"POLYRL_DISABLE_PLUGINS")
        return (f"{kind} name {name!r} is registered by {len(dists)} distributions: {', '.join(dists)}; "
                f"polyrl will not guess which one you meant. Fix: `pip uninstall` all but one of them, "
                f"or disable the others' entry points with POLYRL_DISABLE_PLUGINS")

    # --- queries -------------------------------------------------------------------------------

    @property
    def load_errors(self) -> list[PluginLoadError]:
        """Plugins that failed to import, plus registration hooks that raised."""
        return [*self.pm.load_errors, *self.hook_errors]

    def load_errors_of(self, kind: str) -> list[PluginLoadError]:
        """The ``load_errors`` of one plugin kind ("backends", "rewards", "trackers",
        "environments": tools too): its entry points that failed to import and its register
        hooks that raised or collided. Why one place: listings that looked at import failures
        alone left out a plugin whose register hook raised, without a word."""
        groups = {f"polyrl.{kind}", f"polyrl_register_{kind}"}
        if kind == "environments":
            groups.add("polyrl_register_tools")
        return [e for e in self.load_errors if e.group in groups]

    def owner(self, name: str) -> Any:
        """The plugin object that registered backend ``name`` (its hooks answer first)."""
        return self._owners.get(name)

    def implements(self, name: str, hook: str) -> bool:
        """Whether the plugin that registered backend ``name`` implements ``hook`` (only it answers
        that backend's engines)."""
        owner = self.owner(name)
        return any(impl.plugin is owner for impl in getattr(self.pm.hook, hook).get_hookimpls())

    def names(self) -> list[str]:
        return sorted(self._backends)

    def reward_names(self) -> list[str]:
        return sorted(self._rewards)

    def rewards(self) -> list[RewardSpec]:
        return [self._rewards[n] for n in self.reward_names()]

    def trackers_by_name(self) -> dict[str, TrackerSpec]:
        """Experiment trackers a run's ``[logging] report_to`` can name."""
        return dict(self._trackers)

    def tracker_statuses(self) -> list[TrackerStatus]:
        """Each tracker and whether its library is installed here (``polyrl trackers``)."""
        out = []
        for name in sorted(self._trackers):
            spec = self._trackers[name]
            reason = probe_reason(spec.probe, f"tracker {name!r}")
            out.append(TrackerStatus(name=name, available=reason is None, reason=reason, summary=spec.summary,
                                     install_hint=spec.install_hint, distribution=spec.distribution))
        return out

    def environments_by_name(self) -> dict[str, EnvironmentSpec]:
        """Multi-turn environments an ``[environment] name`` can name."""
        return dict(self._environments)

    def tools_by_name(self) -> dict[str, ToolSpec]:
        """Registered tools an ``[environment] tools`` list can name."""
        return dict(self._tools)

    def environment_statuses(self) -> list[EnvironmentStatus]:
        """Each environment, then each tool, and whether it runs here (``polyrl environments``)."""
        out = []
        for kind, specs in (("environment", self._environments), ("tool", self._tools)):
            for name in sorted(specs):
                status = probe_status(kind, specs[name])
                if (kind, name) in self._agent_conflicts:
                    status = attrs.evolve(status, available=False, reason=self._agent_conflict_text(kind, name))
                out.append(status)
        return out

    def spec(self, name: str) -> BackendSpec:
        try:
            return self._backends[name]
        except KeyError:
            broken = next((e for e in self.load_errors_of("backends") if e.name == name), None)
            if broken is not None:  # installed, but its plugin did not load: "install it" would mislead
                fix = "" if "Fix:" in broken.error else (". Fix: repair or reinstall that distribution "
                                                         "(`polyrl backends` shows the error), or pick another backend")
                raise BackendUnavailable(
                    f"backend {name!r} is installed ({broken.distribution or 'unknown distribution'}) but its "
                    f"plugin did not load: {broken.error}{fix}") from None
            known = ", ".join(self.names()) or "none installed"
            raise BackendUnavailable(
                f"unknown backend {name!r} (known: {known}). Fix: install its plugin ({install_hint(name)}), "
                "or pick a known backend"
            ) from None

    def status(self, name: str) -> BackendStatus:
        spec = self.spec(name)
        if name in self._conflicts:
            reason: str | None = self._conflict_text(name)
        elif name in self._hung_probes:  # asked once: a hang is not waited for again
            reason = self._hung_probes[name]
        else:
            reason = probe_reason(spec.probe, f"backend {name!r}")
            if reason is not None and reason.startswith("the probe of"):
                self._hung_probes[name] = reason
        return BackendStatus(
            name=spec.name,
            available=reason is None,
            reason=reason,
            version=spec.version,
            distribution=spec.distribution,
            summary=spec.summary,
            install_hint=spec.install_hint,
            capabilities=spec.capabilities.as_dict(),
        )

    def diagnostics(self, name: str) -> dict[str, Any]:
        """Backend ``name``'s extra facts for ``polyrl doctor`` ({} when it declares none). Ones
        that raise, exit, outlast ``POLYRL_PLUGIN_TIMEOUT_S`` or answer no mapping are one
        ``"error"`` entry. Why the limit and the thread: ``diagnostics`` calling ``sys.exit(3)``
        ended ``polyrl doctor`` with exit code 3 and no output at all, and one that hung made it
        wait forever (probes, asked just before, were already limited)."""
        facts = self.spec(name).diagnostics
        if facts is None:
            return {}
        try:
            out = call_limited(facts, f"the diagnostics of backend {name!r}")
        except PluginCallTimedOut as exc:
            return {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a broken diagnostics must not break doctor
            return {"error": f"{type(shown(exc)).__name__}: {exc}"}
        if not isinstance(out, Mapping):
            return {"error": f"diagnostics returned {type(out).__name__}, expected a mapping of name to text"}
        return {str(key): value for key, value in out.items()}

    def run_check(self, name: str, which: str, *args: Any) -> None:
        """Call backend ``name``'s ``check_model`` or ``check_checkpoint`` (``which``) with ``args``;
        nothing when it declares none. A ``PolyrlError`` (the user's ``ConfigError``) is raised as
        is; anything else is the plugin's fault, one ``PluginError`` naming backend, distribution
        and check. Why: a ``KeyError`` from ``check_model`` ended ``polyrl train`` in a traceback."""
        spec = self.spec(name)
        check = getattr(spec, which)
        if check is None:
            return
        try:
            check(*args)
        except PolyrlError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit() in a check too: the plugin's doing
            raise PluginError(
                f"backend {name!r} ({spec.distribution or 'unknown distribution'}) hook {which}: raised "
                f"{type(exc).__name__}: {exc}. Fix: report it to the plugin's authors (a setting the user can "
                f"fix is a ConfigError naming it)") from exc

    def statuses(self) -> list[BackendStatus]:
        return [self.status(n) for n in self.names()]

    def available(self) -> list[str]:
        return [s.name for s in self.statuses() if s.available]

    def load(self, name: str, config: EngineConfig) -> Any:
        """Build an engine, or raise ``BackendUnavailable`` saying why and how to fix it."""
        status = self.status(name)
        if not status.available:
            hint = f" Fix: {status.install_hint}" if status.install_hint else ""
            raise BackendUnavailable(f"backend {name!r} is not usable here: {status.reason}.{hint}")
        return self.spec(name).load(config)

    def check_architecture(self, name: str, model_path: str, role: str, field: str = "model.path",
                           device: str | None = None) -> None:
        """Refuse up front, naming backend and architecture, a model the backend declares it
        cannot run in ``role`` ("generate" or "train"), or (``device="cpu"``) not on the CPU
        (``ArchSupport.devices``); silent when undeclared or unreadable."""
        model_type = model_type_of(model_path)
        if model_type is None:
            return
        caps = self.spec(name).capabilities
        if role == "train" and not caps.train_step:  # no architecture is the reason: it never trains
            able = [n for n in self.names() if self._backends[n].capabilities.train_step]
            raise ConfigError(f"backend {name!r} does not train (no train_step)", field="backends.train",
                              fix=f"train with {' or '.join(able) or 'a training backend'}"
                                  + (f", and set generate = {name!r} to generate with it" if caps.generate else ""))
        arch = caps.architectures.get(model_type, caps.architectures.get("*"))
        if (device or "").strip().lower() == "cpu" and arch is not None and arch.devices \
                and "cpu" not in arch.devices and caps.supports(model_type, role):
            raise ConfigError(
                f"backend {name!r} runs architecture {model_type!r} on {', '.join(arch.devices)} only, "
                f"and this run asks for the CPU" + (f" ({arch.notes})" if arch.notes else ""),
                field="model.device",
                fix=f"run it on a device {name!r} supports for it, or pick another backend for {role}")
        if caps.supports(model_type, role) is False:
            able = sorted(t for t in caps.architectures if t != "*" and caps.supports(t, role))
            other = "generate" if role == "train" else "train"
            raise ConfigError(
                f"backend {name!r} cannot {role} architecture {model_type!r} "
                f"(it can {role}: {', '.join(able) or 'none'})",
                field=field,
                fix=f"pick another backend for {role} (`polyrl backends --json` lists each one's "
                    f"architectures) or a model of a supported architecture"
                    + (f"; it may still {other} it" if caps.supports(model_type, other) else ""),
            )

    def check_data_parallel(self, name: str, world_size: int, field: str = "backends.train") -> None:
        """Refuse a multi-rank run (``WORLD_SIZE`` > 1) on a backend that does not declare
        ``Capabilities.data_parallel``: each rank would silently train on its own shard."""
        if world_size > 1 and not self.spec(name).capabilities.data_parallel:
            able = [n for n in self.names() if self._backends[n].capabilities.data_parallel]
            raise ConfigError(
                f"backend {name!r} does not train data-parallel, but WORLD_SIZE={world_size}",
                field=field, fix=f"run one process (no launcher), or train with {', '.join(able) or 'a data-parallel backend'}")

    def check_dtype(self, name: str, dtype: str, role: str, field: str = "model.dtype") -> None:
        """Refuse up front a dtype the backend does not declare (``Capabilities.dtypes``)."""
        dtypes = self.spec(name).capabilities.dtypes
        if dtype not in dtypes:
            raise ConfigError(f"backend {name!r} ({role}) does not run dtype {dtype!r}", field=field,
                              fix=f"use one of {', '.join(dtypes)}, or another {role} backend")

    def resolve_model(self, name: str, field: str = "model.path") -> str:
        """A model alias resolved by a plugin, a Hub id (``org/name``) found in the local HF
        cache, or ``name`` itself (a path). An uncached Hub id is a ``ConfigError`` on ``field``,
        and so is a folder with a link leading out of it (``polyrl.folder_links``), and a name no
        file system holds (``polyrl.path_text``: ``polyrl generate --model``'s was a traceback)."""
        if not name.strip():  # "" was the current folder: `bench --model ""` ran and failed on every side
            raise ConfigError(f"no model given ({name!r})", field=field,
                              fix="give a local HF model folder, a .gguf file, a cached Hub id (\"org/name\") or an "
                                  "alias like smollm2-135m-instruct")
        check_path_text(name, field)
        resolved = self.resolve_alias(name)
        if not resolved:
            resolved = hub.resolve_cached(name, field=field) if hub.looks_like_hub_id(name) else name
        refuse_outside_links(resolved, field)
        return resolved


    def resolve_alias(self, name: str) -> str | None:
        """Ask each plugin in turn (as pluggy would), naming the plugin that raises or returns
        something that is not a path: such a fault is the plugin's, not the user's ``model.path``.
        Every alias lookup goes through here (the ``reward_model`` reward's ``options.path`` too):
        a bare hook call let a plugin's ``sys.exit`` end the run, or its error read as another's."""
        for impl in reversed(self.pm.hook.polyrl_resolve_model.get_hookimpls()):
            who = f"plugin {impl.plugin_name!r} ({self.pm.distribution_of(impl.plugin) or 'unknown distribution'})"
            fix = f"Fix: report it to the plugin's authors, or disable it with POLYRL_DISABLE_PLUGINS={impl.plugin_name}"
            try:
                out = impl.function(name=name)
            except PolyrlError:
                raise  # the plugin's own actionable error (e.g. a ConfigError naming the model)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit(2) there ended every run without a word
                raise PluginError(f"{who} hook polyrl_resolve_model raised {type(exc).__name__}: {exc}. {fix}") from exc
            if out is None:
                continue
            if not isinstance(out, (str, Path)) or not str(out):
                raise PluginError(f"{who} hook polyrl_resolve_model returned {type(out).__name__} "
                                  f"for {name!r}, expected a path (str) or None. {fix}")
            if not Path(out).exists():
                raise PluginError(f"{who} hook polyrl_resolve_model resolved {name!r} to {str(out)!r}, "
                                  f"which does not exist. {fix}")
            return str(out)
        return None


    def convert_model(self, src: str, dst: str, to: str, quantize_bits: int | None) -> str | None:
        """The path the first plugin handling format ``to`` wrote (``polyrl convert``), or None when
        none does. Asked one plugin at a time, as ``resolve_alias`` asks: one raising for a format
        it does not handle (instead of returning None), or calling ``sys.exit``, ended ``polyrl
        convert`` in a traceback or with its exit code, whichever backend the user converted for."""
        for impl in reversed(self.pm.hook.polyrl_convert_model.get_hookimpls()):
            try:
                out = impl.function(src=src, dst=dst, to=to, quantize_bits=quantize_bits)
            except PolyrlError:
                raise  # the plugin's own actionable error (a ConfigError naming the model or the format)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - named, never a traceback
                who = f"plugin {impl.plugin_name!r} ({self.pm.distribution_of(impl.plugin) or 'unknown distribution'})"
                raise PluginError(f"{who} hook polyrl_convert_model raised {type(exc).__name__}: {exc}. Fix: report "
                                  f"it to the plugin's authors (a format it does not handle must return None), or "
                                  f"disable it with POLYRL_DISABLE_PLUGINS={impl.plugin_name}") from exc
            if out is not None:
                return str(out)
        return None


_lock = threading.Lock()
_registry: Registry | None = None


def get_registry(refresh: bool = False) -> Registry:
    """The process-wide registry (built on first use; ``refresh=True`` rescans entry points)."""
    global _registry
    with _lock:
        if _registry is None or refresh:
            _registry = Registry()
        return _registry
