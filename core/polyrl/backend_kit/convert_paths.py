"""The destination folder of ``polyrl convert``, checked before and while a converter writes it.

Why: a converter writes into a temporary sibling and renames it into place. A destination whose
parent is a file, a folder the user cannot write, or one that already holds files ended in the
converter's ``FileExistsError``/``PermissionError``, shown as a plugin's crash; and the GGUF
converter deleted a non-empty destination as "a leftover of an interrupted run", the user's files
with it. Each is one ``ConfigError`` on ``dst`` here, shared by the core and every converter.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from polyrl.errors import ConfigError

FIX = "choose a new folder (or an empty one) in a place you can write to"


def check_destination(dst: str, field: str = "dst") -> Path:
    """``dst`` as a path a converter may create: absent or an empty folder, under a folder (not a
    file). Refused before any model is read (a conversion takes minutes)."""
    target = Path(dst).expanduser()
    if target.is_dir():
        if any(target.iterdir()):
            raise ConfigError(f"destination {dst!r} exists and is not empty", field=field,
                              fix="choose a new folder or delete the old one (polyrl convert never overwrites)")
        return target
    if target.exists() or target.is_symlink():
        raise ConfigError(f"destination {dst!r} exists and is not a folder", field=field, fix=FIX)
    parent = target.parent
    while not parent.exists():  # the nearest folder that exists: the one the converter creates under
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"destination {dst!r} lies under {str(parent)!r}, which is a file", field=field, fix=FIX)
    return target  # a folder it may not write to: refused by staging_folder, before any model is read


def staging_folder(target: Path, field: str = "dst") -> Path:
    """A new temporary folder beside ``target`` (created with its parents) that the converter fills
    and renames to ``target``. What the file system refuses there (a folder this user may not
    write, a read-only mount) is the destination's fault, not the converter's."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    except OSError as exc:
        raise ConfigError(f"cannot create the destination {str(target)!r}: {exc.strerror or exc}",
                          field=field, fix=FIX) from None


__all__ = ["check_destination", "staging_folder"]
