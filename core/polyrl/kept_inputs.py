"""The start folders a checkpoint keeps its own copy of, so a resume does not depend on them.

Why: ``backends.options.initial_adapter`` (a saved peft adapter the LoRA layers start from, e.g.
a TRL script's ``PeftModel``) and a KL reference saved inside ``train.output_dir`` (a TRL
``PeftModel``'s ``initial_reference``: base and adapter merged) are read from their folder at
every start. A resume after that folder was moved or deleted (a temporary folder the script
made) failed at the engine load, or was refused as a changed reference. Each checkpoint holds
a copy (the reference hard-linked where it can be, so no space is spent), and a resume of it
reads the copy of a folder that is gone: the folders the checkpointed run started from. A folder
still there is read as before (a reference changed in place is refused by
``Trainer._check_model_files``, or taken with ``--resume-weights-only``). A reference outside
output_dir is a model of the user's, kept in place like ``model.path``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import attrs

ADAPTER = "initial_adapter"
REFERENCE = "initial_reference"


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def sources(config: Any) -> dict[str, Path]:
    """The folders of ``config`` a checkpoint keeps, by the name of their copy in it."""
    out: dict[str, Path] = {}
    adapter = config.backends.options.get(ADAPTER)
    if isinstance(adapter, str) and Path(adapter).is_dir():
        out[ADAPTER] = Path(adapter)
    reference = config.model.reference_path
    if reference and Path(reference).is_dir() and _inside(Path(reference), Path(config.train.output_dir)):
        out[REFERENCE] = Path(reference)
    return out


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed there
        shutil.copy2(source, target)


def save(config: Any, checkpoint_dir: str | Path) -> None:
    """Copy ``sources(config)`` into ``checkpoint_dir`` (the adapter copied, the reference linked)."""
    for name, folder in sources(config).items():
        shutil.copytree(folder, Path(checkpoint_dir) / name,
                        copy_function=_link_or_copy if name == REFERENCE else shutil.copy2)


def with_copies(config: Any, checkpoint_dir: str | Path) -> Any:
    """``config`` reading the copies ``checkpoint_dir`` holds of the folders it names that are
    gone (only where the config names one: a resume with the option removed goes without it)."""
    found = Path(checkpoint_dir)
    adapter = config.backends.options.get(ADAPTER)
    if isinstance(adapter, str) and not Path(adapter).is_dir() and (found / ADAPTER).is_dir():
        config = attrs.evolve(config, backends=attrs.evolve(config.backends, options={
            **config.backends.options, ADAPTER: str(found / ADAPTER)}))
    reference = config.model.reference_path
    if reference and not Path(reference).exists() and (found / REFERENCE).is_dir():
        config = attrs.evolve(config, model=attrs.evolve(config.model, reference_path=str(found / REFERENCE)))
    return config
