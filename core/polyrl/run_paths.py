"""The run's relative paths made absolute once, from the folder the run started in.

Why: the working folder is the whole process's, and plugin code runs in the trainer's process: a
reward function, a tool or an environment's ``reset`` that calls ``os.chdir`` moves it for every
thread. ``plugin_state`` sets it back after each call, but not while a call runs (a checkpoint or
metrics line written then by another thread: a rollout sampled ahead, an abandoned reward still
running) nor after a call abandoned past its time limit. A run that went on naming its files by a
relative ``train.output_dir`` (``runs/polyrl`` by default) then wrote its metrics and checkpoints
into the plugin's folder, or failed with "train.output_dir itself is gone". Anchored at the
start, a later change of the working folder never moves the run's files.

Only what the run reads or writes after it started is anchored: ``train.output_dir`` (every file
of the run, its trackers' folders below it) is changed in the config itself (a resume applies a
changed output_dir, so the checkpoint's config compares as before); the start folders a checkpoint
keeps a copy of (``kept_inputs``) and a ``--resume`` path are anchored where they are read, so the
config a checkpoint stores, and compares at resume, keeps them as the user wrote them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from polyrl import kept_inputs


def start_folder() -> str | None:
    """The working folder now (called once, as the run starts); None when it was deleted under the
    process (relative paths then name nothing, and stay as they are for their own error)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def anchored(path: str, start: str | None) -> str:
    """``path`` made absolute from ``start`` (``~`` is expanded by the config already). Not
    normalised: a ``..`` after a symbolic link means what it meant in the start folder."""
    if start is None or os.path.isabs(path):
        return path
    return str(Path(start) / path)


def with_output_dir(config: Any, start: str | None) -> Any:
    """``config`` with ``train.output_dir`` absolute."""
    given = config.train.output_dir
    absolute = anchored(given, start)
    if absolute == given:
        return config
    return attrs.evolve(config, train=attrs.evolve(config.train, output_dir=absolute))


def _local(value: Any, start: str | None) -> Any:
    """A relative ``value`` that names a file or folder from ``start``, made absolute; anything else
    (a Hub id, an alias, a path that is not there: its own error names it as given) unchanged."""
    if not isinstance(value, str) or not value or start is None or os.path.isabs(value):
        return value
    absolute = anchored(value, start)
    return absolute if os.path.exists(absolute) else value


def with_start_inputs(config: Any, start: str | None) -> Any:
    """``config`` with the models and the start folders checkpoints keep a copy of
    (``kept_inputs.sources``: the KL reference, an initial adapter) absolute where they name a local
    path: read again as the run goes on (a checkpoint's copies, a model's config.json)."""
    model = config.model
    paths = {key: _local(getattr(model, key), start) for key in ("path", "reference_path")}
    if any(paths[key] != getattr(model, key) for key in paths):
        config = attrs.evolve(config, model=attrs.evolve(model, **paths))
    generator = _local(config.generation.max_model_path, start)
    if generator != config.generation.max_model_path:
        config = attrs.evolve(config, generation=attrs.evolve(config.generation, max_model_path=generator))
    adapter = config.backends.options.get(kept_inputs.ADAPTER)
    if _local(adapter, start) != adapter:
        config = attrs.evolve(config, backends=attrs.evolve(config.backends, options={
            **config.backends.options, kept_inputs.ADAPTER: _local(adapter, start)}))
    return config
