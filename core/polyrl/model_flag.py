"""A command's ``--model`` flag: its model resolved and checked, and the errors about it naming the flag.

Why: ``polyrl generate`` and ``polyrl serve`` passed the flag's value straight to the backend, whose
errors name the config fields ``model.path`` or ``model``, which these commands do not have; and a
name that is neither a path nor an alias was "model path 'x' does not exist", with the Python API's
advice (``registry.resolve_model('tiny-llama')``) as its fix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from polyrl.errors import ConfigError
from polyrl.registry import Registry

#: The config fields a backend's errors name for the model it loads.
MODEL_FIELDS = ("model.path", "model")


def resolve_flag_model(registry: Registry, name: str, flag: str = "--model") -> str:
    """``name`` resolved (``Registry.resolve_model``), refused naming ``flag`` when nothing is there."""
    path = registry.resolve_model(name, field=flag)
    if not Path(path).exists():
        raise ConfigError(f"model {name!r} is neither a local path nor a known alias", field=flag,
                          fix="give a local HF model folder, a .gguf file, a cached Hub id (\"org/name\") or an "
                              "alias like smollm2-135m-instruct")
    return path


@contextlib.contextmanager
def model_errors_named(flag: str = "--model") -> Iterator[None]:
    """A ``ConfigError`` raised inside about the model (``MODEL_FIELDS``) names ``flag`` instead; its
    fix's mentions of ``model.path`` too (not of the bare word "model", which is no field there)."""
    try:
        yield
    except ConfigError as exc:
        if exc.field not in MODEL_FIELDS:
            raise
        exc.renamed(flag, in_fix=exc.field == "model.path")
        raise
