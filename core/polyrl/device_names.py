"""``model.device`` checked by its spelling when the config loads, without importing a backend.

Why here and not only in the backends: each backend resolves the device when its engine loads,
after the data, the rewards and (under ``polyrl launch --dry-run``) every other check have passed,
so ``device = "abc"`` passed a dry run and failed minutes later. Whether this machine *has* the
device stays the backend's question (``polyrl_torch.devices``, the MLX and MAX engines); this
module only refuses a name no polyrl backend would read. The names are the union of what the
backends accept: torch's ``cpu``/``cuda[:N]``/``mps``/``xpu[:N]``, MAX's ``gpu[:N]``, MLX's
``gpu``/``metal``, and ``auto`` for all. Case and surrounding spaces do not matter (``normalized``):
MLX and MAX read ``"GPU"`` and ``" cuda "`` as ``gpu`` / ``cuda``, so a config that ran on them
keeps running, and torch gets the lower-case name it reads.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from polyrl.errors import ConfigError

#: Device types some backend runs on, and whether a ``:N`` index may follow.
DEVICE_TYPES: dict[str, bool] = {"auto": False, "cpu": True, "cuda": True, "mps": True, "gpu": True,
                                 "metal": False, "xpu": True}

_SHAPE = re.compile(r"([a-z]+)(?::(\d+))?")

FIX = "use auto, cpu, cuda, cuda:N, mps or gpu (which a backend takes: `polyrl backends`)"


def normalized(value: Any) -> Any:
    """``value`` as every backend reads it: a string in lower case without surrounding spaces
    (MLX and MAX lower-case the name themselves, torch does not); anything else as given, for
    ``check_device`` to refuse."""
    return value.strip().lower() if isinstance(value, str) else value


def check_device(value: Any, field: str = "model.device") -> None:
    """Refuse a device string no backend reads, naming ``field``, the value and the closest name."""
    if not isinstance(value, str):
        raise ConfigError(f"must be a device name such as \"cuda\", got {type(value).__name__} {value!r}",
                          field=field, fix=FIX)
    match = _SHAPE.fullmatch(normalized(value))
    kind = match.group(1) if match else None
    if match and kind in DEVICE_TYPES and (match.group(2) is None or DEVICE_TYPES[kind]):
        return
    if match and kind in DEVICE_TYPES:
        raise ConfigError(f"device {value!r} takes no index", field=field, fix=f"use {kind!r}")
    head = value.strip().lower().partition(":")[0]
    close = difflib.get_close_matches(head, DEVICE_TYPES, n=1, cutoff=0.6)
    if head in DEVICE_TYPES:  # "cuda:x", "cuda: 0": a known name, its index misspelt
        hint = f"write it as {head!r}" + (f" or '{head}:N' (N the device's index, e.g. '{head}:0')"
                                           if DEVICE_TYPES[head] else "")
    else:
        hint = f"did you mean {close[0]!r}? " + FIX if close else FIX
    raise ConfigError(f"unknown device {value!r}", field=field, fix=hint)
