"""The start folders a checkpoint keeps its own copy of, so a resume does not depend on them.

Why: ``backends.options.initial_adapter`` (a saved peft adapter the LoRA layers start from, e.g.
a TRL script's ``PeftModel``) and the KL reference ``model.reference_path`` (a TRL ``PeftModel``'s
``initial_reference`` inside ``train.output_dir``: base and adapter merged, or a model of the
user's) are read from their folder at every start. A resume after that folder was moved or
deleted (a temporary folder the script made) failed at the engine load, or was refused as a
changed reference. Each checkpoint holds a copy, and a resume of it reads the copy of a folder
that is gone: the folders the checkpointed run started from. A folder still there is read as
before (a reference changed in place is refused by ``Trainer._check_model_files``, or taken with
``--resume-weights-only``).

The reference is hard-linked, so no space is spent. One outside output_dir (a full model of the
user's, perhaps another file system) is kept only where it links: a full copy per checkpoint
would cost a model's size each time; where it cannot link, the checkpoint holds none (``save``
names it) and a resume refuses its reference gone, as it refuses it changed.
"""

from __future__ import annotations

import errno
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
    if reference and Path(reference).is_dir():
        out[REFERENCE] = Path(reference)
    return out


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed there
        shutil.copy2(source, target)


def _link_tree(source: Path, target: Path) -> OSError | None:
    """Hard-link every file of ``source`` into ``target`` (a link inside it, as a Hub cache's
    snapshot holds, is followed to its file; hidden ones are left out, as ``model_files`` leaves
    them out); what refused it, with ``target`` removed, where one cannot be linked, else None.
    A full disk or quota is raised, not returned: the checkpoint cannot be written then, and it
    fails as any checkpoint on a full disk does, not as a reference kept nowhere."""
    try:
        for folder, folders, files in os.walk(source, followlinks=True):
            folders[:] = [f for f in folders if not f.startswith(".")]  # a clone's .git, a download cache
            here = target / Path(folder).relative_to(source)
            here.mkdir(parents=True, exist_ok=True)
            for name in files:
                if not name.startswith("."):
                    os.link(Path(folder) / name, here / name, follow_symlinks=True)
    except OSError as exc:
        shutil.rmtree(target, ignore_errors=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise
        return exc
    return None


def unlinked_reason(exc: OSError) -> tuple[str, str]:
    """(why, fix) for a reference ``_link_tree`` could not link. Why apart: another file system is
    one cause; the kernel also refuses a link to another user's file (``fs.protected_hardlinks``, a
    shared model folder) or an immutable one, where moving the model next to output_dir is no fix."""
    keep = "keep model.reference_path as it is until the run is done, or "
    if exc.errno == errno.EXDEV:
        return ("it is on another file system than train.output_dir",
                keep + "put it on output_dir's file system: each checkpoint then hard-links it (no space spent)")
    return (f"the system refuses a hard link to its files in train.output_dir ({exc.strerror or exc}: another "
            "user's files under fs.protected_hardlinks, immutable files, or a file system without hard links)",
            keep + "point it at a copy of the model of your own on output_dir's file system: each checkpoint "
                   "then hard-links it (no space spent)")


def save(config: Any, checkpoint_dir: str | Path) -> list[tuple[Path, OSError]]:
    """Copy ``sources(config)`` into ``checkpoint_dir`` (the adapter copied, the reference linked);
    returns the folders not kept, each with what refused its link: a reference outside output_dir
    that could not be linked (``unlinked_reason``)."""
    unkept: list[tuple[Path, OSError]] = []
    for name, folder in sources(config).items():
        target = Path(checkpoint_dir) / name
        if name == REFERENCE and not _inside(folder, Path(config.train.output_dir)):
            refused = _link_tree(folder, target)
            if refused is not None:
                unkept.append((folder, refused))
            continue
        shutil.copytree(folder, target, copy_function=_link_or_copy if name == REFERENCE else shutil.copy2)
    return unkept


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
