"""What a register hook hands ``register``, checked before the registry (or the reward computer) keeps it.

Why: the spec classes are plain attrs classes with no validators, so a plugin registering
``BackendSpec(name=5, ...)`` or ``RewardSpec(name=None)`` was kept, and ``polyrl backends``,
``polyrl doctor``, ``polyrl rewards``, ``polyrl trackers`` and ``polyrl environments`` (and a run)
then ended in a ``TypeError`` traceback from sorting the names; ``capabilities={...}`` (a dict,
not ``Capabilities``) did the same from ``as_dict``. One plugin's wrong field took every listing
down instead of being listed as that plugin's load error.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from polyrl.errors import PluginError
from polyrl.plugin_calls import call_limited
from polyrl.types import BackendSpec, Capabilities

#: Fields that must be callable when present (None allowed only in ``_OPTIONAL_CALLABLES``).
_CALLABLES = ("load", "create", "function", "probe")
_OPTIONAL_CALLABLES = ("diagnostics", "check_checkpoint", "check_model")
#: Fields shown as text by the listings.
_TEXTS = ("summary", "install_hint", "version", "distribution")


def spec_problem(spec: Any) -> str | None:
    """What is wrong with a registered spec's fields (one phrase naming the field), or None."""
    name = getattr(spec, "name", None)
    if not isinstance(name, str) or not name.strip():
        return f"name is {_kind(name)}, expected a non-empty str"
    for field in _CALLABLES:
        if hasattr(spec, field) and not callable(getattr(spec, field)):
            return f"{field} is {_kind(getattr(spec, field))}, expected a callable"
    for field in _OPTIONAL_CALLABLES:
        value = getattr(spec, field, None)
        if value is not None and not callable(value):
            return f"{field} is {_kind(value)}, expected a callable or None"
    for field in _TEXTS:
        if hasattr(spec, field) and not isinstance(getattr(spec, field), str):
            return f"{field} is {_kind(getattr(spec, field))}, expected a str"
    if isinstance(spec, BackendSpec) and not isinstance(spec.capabilities, Capabilities):
        return f"capabilities is {_kind(spec.capabilities)}, expected polyrl.types.Capabilities"
    return None


def _kind(value: Any) -> str:
    """A wrong field value, short: its type, and the value itself when it is small."""
    text = repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 40 else type(value).__name__


def registered_by(impl: Any, hook_name: str, kind: type, dist: str) -> list[Any]:
    """The specs one register hook (pluggy ``impl`` of ``hook_name``) registers, all or nothing:
    it runs under the plugin time limit on its own thread (``call_limited``), and what it raised
    (``PluginCallRaised`` for ``sys.exit``, ``PluginCallTimedOut``) is raised again, as is a
    ``PluginError`` for a spec that is no ``kind``, a spec with a wrong field, or an answer that
    is not None. Why one function: the reward computer asked the reward register hooks again,
    bare, so one calling ``sys.exit(5)`` ended ``polyrl train`` with exit code 5 and no word
    although ``polyrl rewards`` listed it as a load error."""
    pending: list[Any] = []  # committed only when the hook returns
    listening = [True]  # a register hook past its time limit registers nothing later
    what = kind.__name__

    def register(spec: Any) -> None:
        if not listening[0]:
            return
        if not isinstance(spec, kind):
            raise PluginError(f"{dist or 'a plugin'} registered {type(spec).__name__}, expected {what}")
        problem = spec_problem(spec)
        if problem is not None:  # kept, it took every listing down with a traceback
            raise PluginError(
                f"{dist or 'a plugin'} registered {'an' if what[0] in 'AEIOU' else 'a'} {what} whose {problem}; "
                f"nothing of this hook is registered. Fix: correct the {what} (see polyrl.hookspecs), or report "
                f"it to the plugin's authors")
        name = getattr(spec, "name")  # noqa: B009 - checked a str above; ``kind`` is no static type
        if any(kept.name == name and kept is not spec for kept in pending):  # the last silently won
            raise PluginError(
                f"{dist or 'a plugin'} registered two {what}s named {name!r} in one {hook_name}; the second "
                f"would silently replace the first, so nothing of this hook is registered. Fix: give each its "
                f"own name, or register it once")
        pending.append(spec)

    try:
        returned = call_limited(partial(impl.function, register=register), f"{impl.plugin_name}'s {hook_name}")
    finally:
        listening[0] = False
    if returned is not None:  # specs returned, not registered: the plugin added nothing, silently
        raise PluginError(
            f"{hook_name} returned a {type(returned).__name__} instead of None; what it returns is not read, so "
            f"nothing of this hook is registered. Fix: call register(spec) once for each spec and return None")
    return pending
