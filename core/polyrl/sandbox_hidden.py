"""The run's own folders that code samples must not see, wherever they lie: ``train.output_dir``
and the dataset's folders (``data.path``, ``data.eval_path``, ``data.cache_dir``).

Why: the code sandbox hid the trainer's working folder and home only, so an output folder or a
dataset elsewhere inside ``/usr`` (which every sample gets read-only: ``/usr/local/share/run``)
showed samples the expected answers, the run's config and its checkpoints. The trainer registers
its folders here before any reward runs; ``polyrl.sandbox.host_view`` hides them as it hides the
working folder. A module of its own, outside the sandbox package: the trainer registers without loading it.
"""

from __future__ import annotations

import glob
import os
import threading
from collections.abc import Iterable

_lock = threading.Lock()
_folders: list[str] = []


def folder_of(path: str | os.PathLike[str]) -> str:
    """The folder to hide for ``path``: a glob's folder before its first pattern, an existing
    file's folder, else the path itself (a folder, or one the run makes later: its output_dir)."""
    text = os.path.expanduser(os.fspath(path))
    if glob.has_magic(text):
        parts = text.split(os.sep)
        text = os.sep.join(parts[:next(i for i, part in enumerate(parts) if glob.has_magic(part))]) or os.sep
    full = os.path.abspath(text)
    return os.path.dirname(full) if os.path.lexists(full) and not os.path.isdir(full) else full


def hide_from_samples(paths: Iterable[str | os.PathLike[str] | None]) -> None:
    """Hide these paths' folders (``folder_of``; None is skipped) from every code sample from now
    on, in this process, as the trainer's working folder is."""
    with _lock:
        for path in paths:
            if path is not None and (folder := folder_of(path)) not in _folders:
                _folders.append(folder)


def hidden() -> list[str]:
    """The folders registered so far."""
    with _lock:
        return list(_folders)


def state() -> tuple[tuple[str, bool], ...]:
    """Each registered folder and whether it exists now: a launch built before the run made its
    output_dir (the setup check) is built again once it exists, so the folder is then hidden."""
    return tuple((folder, os.path.isdir(folder)) for folder in hidden())
