"""Reading a backend's own switches from ``[backends.options]`` (``EngineConfig.options``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polyrl.errors import ConfigError


def bool_option(options: Mapping[str, Any], name: str, default: bool, fix: str) -> bool:
    """``backends.options.<name>`` (``default`` when absent); anything but a boolean is a
    ConfigError naming the field, so ``"no"`` is never read as true."""
    value = options.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"backends.options.{name} must be true or false, not {value!r}",
                          field=f"backends.options.{name}", fix=fix)
    return value
