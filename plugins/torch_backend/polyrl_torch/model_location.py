"""Where the torch engine reads a model from: a HF folder, a ``.gguf`` file, or a folder and
``backends.options.gguf_file``.

Why a module of its own, without torch: the startup check (``startup_check.check_model``, which
``polyrl launch --dry-run`` runs) asks the same question the engine's load asks, so a ``model.path``
the load refuses (a folder without config.json, a file that is no ``.gguf``, a FIFO or a device) is
refused there too; ``polyrl launch --dry-run`` passed them and every rank refused them.
"""

from __future__ import annotations

import stat
from pathlib import Path

from polyrl.backend_kit.model_folders import adapter_folder_error
from polyrl.errors import ConfigError
from polyrl.folder_links import refuse_outside_links


def model_location(model: str, gguf: str | None) -> tuple[str, str | None]:
    """(folder, gguf file name or None) for a HF folder, a ``.gguf`` file, or a folder + option."""
    path = Path(model).expanduser()
    if not path.exists():
        raise ConfigError(
            f"model path {model!r} does not exist",
            field="model",
            fix="give a local HF model folder or .gguf file, or resolve an alias first "
            "(registry.resolve_model('tiny-llama') / 'smollm2-135m-instruct')",
        )
    refuse_outside_links(path, field="model.path")  # also for an engine built without the registry
    kind = path.stat().st_mode
    if not stat.S_ISDIR(kind) and not stat.S_ISREG(kind):  # it was "has no config.json", as for a folder
        raise ConfigError(f"{model!r} is neither a folder nor a regular file (a FIFO, socket or device)",
                          field="model.path", fix="point at the model folder (with config.json) or a .gguf file")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConfigError(f"{model!r} is a file but not a .gguf file", field="model",
                              fix="point at the model folder (with config.json) or a .gguf file")
        return str(path.parent), path.name
    if gguf is None and not (path / "config.json").exists():
        ggufs = sorted(p.name for p in path.glob("*.gguf"))
        adapter = adapter_folder_error(path)
        if len(ggufs) == 1:
            gguf = ggufs[0]
        elif adapter is not None:
            raise adapter
        else:
            raise ConfigError(f"{model!r} has no config.json", field="model.path",
                              fix="point at a HF model folder, or set backends.options.gguf_file")
    return str(path), gguf
