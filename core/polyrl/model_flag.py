"""A command's ``--model`` (and engine) flags: the model resolved and checked, the errors naming the flags.

Why: ``polyrl generate`` and ``polyrl serve`` passed the flag's value straight to the backend, whose
errors name the config fields ``model.path`` or ``model``, which these commands do not have; and a
name that is neither a path nor an alias was "model path 'x' does not exist", with the Python API's
advice (``registry.resolve_model('tiny-llama')``) as its fix. So for ``polyrl serve``'s ``--dtype``,
``--device``, ``--max-length`` and ``--threads``: "EngineConfig.max_length: ...", "device: ... Fix: use
device='cpu'" named fields and spellings of the Python API.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from polyrl.errors import BackendUnavailable, ConfigError
from polyrl.registry import Registry

#: The config fields a backend's (and ``EngineConfig``'s) errors name, by the flag that sets them here.
FLAG_FIELDS = {
    "--model": ("model.path", "model"),
    "--dtype": ("model.dtype", "dtype", "EngineConfig.dtype"),
    "--device": ("model.device", "device", "EngineConfig.device"),
    "--max-length": ("model.max_length", "max_length", "EngineConfig.max_length"),
    "--threads": ("train.threads", "threads", "EngineConfig.threads"),
    "--quantize-bits": ("quantize_bits",),  # polyrl_convert_model's argument
}


def resolve_flag_model(registry: Registry, name: str, flag: str = "--model") -> str:
    """``name`` resolved (``Registry.resolve_model``), refused naming ``flag`` when nothing is there."""
    path = registry.resolve_model(name, field=flag)
    if not Path(path).exists():
        raise ConfigError(f"model {name!r} is neither a local path nor a known alias", field=flag,
                          fix="give a local HF model folder, a .gguf file, a cached Hub id (\"org/name\") or an "
                              "alias like smollm2-135m-instruct")
    return path


@contextlib.contextmanager
def flag_errors_named(*flags: str) -> Iterator[None]:
    """A ``ConfigError`` raised inside about a field one of ``flags`` sets (``FLAG_FIELDS``) names
    that flag instead; its fix's mentions of a dotted field too (not of a bare word such as
    "model" or "device", which reads as plain English there). With ``--backend`` among ``flags``, a
    ``BackendUnavailable`` (an unknown backend, one unusable here) names it too."""
    try:
        yield
    except BackendUnavailable as exc:  # the backend --backend names: unknown, or unusable here
        if "--backend" not in flags:
            raise
        raise ConfigError(str(exc), field="--backend") from None
    except ConfigError as exc:
        flag = next((f for f in flags if exc.field in FLAG_FIELDS.get(f, ())), None)
        if flag is None:
            raise
        exc.renamed(flag, in_fix=exc.field is not None and "." in exc.field)
        raise
