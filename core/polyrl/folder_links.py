"""Symbolic links inside a folder polyrl reads (a model, a checkpoint) must stay inside it.

Why: a downloaded model or checkpoint folder is someone else's data. A link in it such as
``chat_template.jinja -> ~/.ssh/id_rsa`` or ``model.safetensors -> /home/me/secret`` would make
polyrl read a file the user never named: the chat template is rendered into every prompt (logged,
sent to trackers, saved with every checkpoint's tokenizer), and a link to a FIFO or a device
hangs the load. So every link is resolved and refused when it leaves the folder, and a FIFO,
socket or device in the folder is refused too.

The Hugging Face cache is the one layout whose links leave the folder on purpose: a snapshot
(``models--org--name/snapshots/<rev>/``) is made of links to ``../../blobs/``; links into that
repository's own cache folder are allowed there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: How deep the check looks: a loader reads a model's top level and its subfolders' files
#: (``original/``, ``tokenizer/``); a deeper walk would only cost time on a folder such as ``~``.
MAX_DEPTH = 2

#: Names of what a loader may read next to a ``.gguf`` file (tokenizer, chat template, config).
_LOADER_SUFFIXES = (".json", ".jinja", ".model", ".txt", ".safetensors", ".gguf", ".py", ".tiktoken")

#: Why a FIFO, socket or device is refused wherever polyrl reads a file the user named.
NOT_REGULAR = "not a regular file (a FIFO, socket or device: reading it can block forever)"


def _allowed_root(folder: Path) -> Path:
    """The folder itself, or the repository's cache folder for a Hugging Face snapshot."""
    real = folder.resolve()
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith(("models--", "datasets--")):
        return real.parent.parent
    return real


def _problem(entry: Path, root: Path) -> str | None:
    """What is wrong with ``entry`` (not followed if a link), or None for a plain file or folder
    or a link that stays inside ``root``."""
    try:
        if entry.is_symlink():
            target = Path(os.path.realpath(entry))
            if not target.is_relative_to(root):
                return f"a symbolic link to {target}, outside the folder"
            if not target.exists():
                return None  # dangling: the loader reports a missing file
        mode = entry.stat().st_mode  # a link inside the folder: what it leads to
    except OSError:  # unreadable here (permissions): no loader reads it either
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return NOT_REGULAR


def outside_link(folder: str | Path) -> tuple[str, str] | None:
    """(the entry relative to ``folder``, what is wrong with it) for the first symbolic link in
    ``folder`` (``MAX_DEPTH`` levels down, links not followed) that resolves outside it, or the
    first FIFO, socket or device in it; None when there is none. ``folder`` itself may be a link:
    the user named it."""
    base = Path(folder)
    if not base.is_dir():
        return None
    root = _allowed_root(base)
    for here, dirs, files in os.walk(base, followlinks=False):
        if len(Path(here).relative_to(base).parts) + 1 >= MAX_DEPTH:
            dirs_below, dirs[:] = list(dirs), []  # their entries are deeper than a loader reads
        else:
            dirs_below = dirs
        for name in sorted([*dirs_below, *files]):
            entry = Path(here) / name
            if (why := _problem(entry, root)) is not None:
                return str(entry.relative_to(base)), why
    return None


def outside_link_beside(file: str | Path) -> tuple[str, str] | None:
    """The same for a model given as one file (a ``.gguf``): the files a loader may read beside
    it (tokenizer, config, chat template), not the rest of a folder such as ~/Downloads."""
    path = Path(file)
    root = _allowed_root(path.parent)
    for entry in sorted(path.parent.iterdir()):
        if entry.name.endswith(_LOADER_SUFFIXES) and entry.name != path.name:
            if (why := _problem(entry, root)) is not None:
                return entry.name, why
    return None


def refuse_outside_links(path: str | Path, field: str) -> None:
    """``ConfigError`` on ``field`` when the model at ``path`` (a folder, or a file such as a
    ``.gguf``) has a link leading outside its folder or a FIFO/device in it; nothing for a path
    that does not exist (the loader says that)."""
    from polyrl.errors import ConfigError

    p = Path(path).expanduser()
    found = outside_link(p) if p.is_dir() else outside_link_beside(p) if p.is_file() else None
    if found is not None:
        name, why = found
        folder = p if p.is_dir() else p.parent
        raise ConfigError(
            f"{name} in {str(folder)!r} is {why}; polyrl never reads outside a model folder",
            field=field,
            fix="re-download the model, or put the real file in the folder in place of the link "
                "(only if that file belongs to this model)")
