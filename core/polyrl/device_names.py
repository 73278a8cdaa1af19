"""``model.device`` checked by its spelling against the names each backend of the run reads,
before any engine loads and without importing a backend.

Why: each backend resolves the device when its engine loads, after the data, the rewards and
(under ``polyrl launch --dry-run``) every other check have passed, so ``device = "abc"`` passed a
dry run and failed minutes later. Whether this machine *has* the device stays the backend's
question (``polyrl_torch.devices``, the MLX and MAX engines); here only a name the backend would
not read is refused. Two moments:

* when the config loads (``RunConfig``), for polyrl's own backends, whose names the core knows
  (``BUILTIN_DEVICE_NAMES``) without importing their plugins;
* before the engines load (``polyrl.engines.check_engines``, the dry run too), for every backend
  of the run that declares ``Capabilities.device_names``, third-party ones included. A backend
  that declares none is not checked: its engine decides when it loads (a check against names
  it never declared refused ``"npu:0"`` for a backend that runs on it).

Every engine of a run gets ``model.device``, so the name must be one each of its backends reads.
A declared name is ``"kind"`` (read without an index) or ``"kind:N"`` (``kind:0``, ``kind:1``...
read); ``auto`` is read by every backend (the default, ``EngineConfig.device``). Case and
surrounding spaces do not matter (``normalized``): MLX and MAX read ``"GPU"`` and ``" cuda "`` as
``gpu`` / ``cuda``, so a config that ran on them keeps running, and torch gets the lower-case
name it reads.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from polyrl.errors import ConfigError

AUTO = "auto"

#: The names polyrl's own backends read (``polyrl_torch.devices``, ``polyrl_mlx.engine``,
#: ``polyrl_max.engine``), for the check at config load; their plugins declare these same tuples
#: as ``Capabilities.device_names``. ``remote`` reads no device (its servers place the model).
BUILTIN_DEVICE_NAMES: dict[str, tuple[str, ...] | None] = {
    "torch": ("cpu", "cpu:N", "cuda", "cuda:N", "mps", "mps:N", "xpu", "xpu:N"),
    "mlx": ("cpu", "gpu", "metal", "mps", "cuda"),
    "max": ("cpu", "gpu", "gpu:N", "cuda", "cuda:N"),
    "remote": None,
}

_DECLARED = re.compile(r"([a-z][a-z0-9_]*)(:n)?")  # lower-cased: "NPU:N" is "npu:n"
_VALUE = re.compile(r"([a-z][a-z0-9_]*)(?::(\d+))?")


def normalized(value: Any) -> Any:
    """``value`` as every backend reads it: a string in lower case without surrounding spaces
    (MLX and MAX lower-case the name themselves, torch does not); anything else as given, for
    ``check_device_type`` to refuse."""
    return value.strip().lower() if isinstance(value, str) else value


def declared_names(value: Iterable[str] | None) -> tuple[str, ...] | None:
    """``Capabilities.device_names`` as the core reads it (its attrs converter): None (not
    declared), or each name lower-cased, ``"kind"`` or ``"kind:N"``. Anything else is the
    plugin's mistake, a ``ValueError`` its register hook reports as a load error."""
    if value is None:
        return None
    if isinstance(value, str):  # tuple("cuda") would be five one-letter names
        raise ValueError(f"Capabilities.device_names must be a tuple of names, got the string {value!r}")
    names = []
    for given in value:
        match = _DECLARED.fullmatch(normalized(given)) if isinstance(given, str) else None
        if match is None:
            raise ValueError(f"Capabilities.device_names: {given!r} is no device name; write 'kind' "
                             "(e.g. 'npu') or 'kind:N' for an indexed one ('npu:N' reads npu:0, npu:1...)")
        names.append(match.group(1) + (":N" if match.group(2) else ""))
    return tuple(names)


def _table(names: Sequence[str]) -> dict[str, tuple[bool, bool]]:
    """kind -> (read without an index, read with one); ``auto`` always, without one."""
    table: dict[str, tuple[bool, bool]] = {AUTO: (True, False)}
    for name in names:
        kind, _, n = name.partition(":")
        bare, indexed = table.get(kind, (False, False))
        table[kind] = (bare or not n, indexed or bool(n))
    return table


def _spelled(table: dict[str, tuple[bool, bool]]) -> str:
    """``auto, cpu, cuda[:N] or gpu``: the names of ``table`` as a user writes them."""
    shown = [kind + ("[:N]" if bare and indexed else ":N" if indexed else "") for kind, (bare, indexed) in table.items()]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def check_device_type(value: Any, field: str = "model.device") -> None:
    """Refuse a device that is no string (whatever backend reads it)."""
    if not isinstance(value, str):
        raise ConfigError(f"must be a device name such as \"cuda\", got {type(value).__name__} {value!r}",
                          field=field, fix='write it as a string, e.g. device = "auto"')


def check_device(value: Any, names: Sequence[str] | None, backend: str, field: str = "model.device") -> None:
    """Refuse a device string ``backend`` does not read (``names``, as ``declared_names`` gives
    them; None: not declared, only its type is checked), naming ``field``, the value, the backend
    and the names it reads, with the closest one."""
    check_device_type(value, field)
    if names is None:
        return
    table = _table(names)
    text = normalized(value)
    match = _VALUE.fullmatch(text)
    kind, index = (match.group(1), match.group(2)) if match else (None, None)
    if kind in table:
        bare, indexed = table[kind]
        if (bare if index is None else indexed):
            return
        if index is None:
            raise ConfigError(f"device {value!r} needs an index for backend {backend!r}", field=field,
                              fix=f"write it as '{kind}:N' (N the device's index, e.g. '{kind}:0')")
        raise ConfigError(f"device {value!r} takes no index for backend {backend!r}", field=field,
                          fix=f"use {kind!r}")
    every = f"use {_spelled(table)} (the names backend {backend!r} reads)"
    head = text.partition(":")[0]
    if head in table:  # "cuda:x", "cuda: 0": a name it reads, the index misspelt
        bare, indexed = table[head]
        hint = " or ".join(([repr(head)] if bare else []) + ([f"'{head}:N' (N the device's index, e.g. '{head}:0')"]
                                                            if indexed else []))
        hint = f"write it as {hint}"
    else:
        close = difflib.get_close_matches(head, table, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " + every if close else every
    raise ConfigError(f"unknown device {value!r} for backend {backend!r}", field=field, fix=hint)


def check_builtin_devices(value: Any, backends: Iterable[str], field: str = "model.device") -> None:
    """The check at config load: ``value`` against each of ``backends`` that is polyrl's own
    (its names known without importing it); another backend's names wait for its plugin
    (``check_device`` from ``polyrl.engines``), and a backend that declares none reads any."""
    check_device_type(value, field)
    for backend in dict.fromkeys(backends):
        check_device(value, BUILTIN_DEVICE_NAMES.get(backend), backend, field)
