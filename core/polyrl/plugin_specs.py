"""What a register hook hands ``register``, checked before the registry keeps it.

Why: the spec classes are plain attrs classes with no validators, so a plugin registering
``BackendSpec(name=5, ...)`` or ``RewardSpec(name=None)`` was kept, and ``polyrl backends``,
``polyrl doctor``, ``polyrl rewards``, ``polyrl trackers`` and ``polyrl environments`` (and a run)
then ended in a ``TypeError`` traceback from sorting the names; ``capabilities={...}`` (a dict,
not ``Capabilities``) did the same from ``as_dict``. One plugin's wrong field took every listing
down instead of being listed as that plugin's load error.
"""

from __future__ import annotations

from typing import Any

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
