"""The run's own folders that code samples must not see, wherever they lie: ``train.output_dir``
and the dataset's folders (``data.path``, ``data.eval_path``, ``data.cache_dir``).

Why: the code sandbox hid the trainer's working folder and home only, so an output folder or a
dataset elsewhere inside ``/usr`` (which every sample gets read-only: ``/usr/local/share/run``)
showed samples the expected answers, the run's config and its checkpoints. The trainer registers
its folders here before any reward runs; ``polyrl.sandbox.host_view`` hides them as it hides the
working folder. A module of its own, outside the sandbox package: the trainer registers without loading it.

A dataset file lying directly in a folder that cannot be hidden (a system folder the sample's
interpreter needs: ``/usr/local/share/train.jsonl``, or ``/opt`` and ``/etc`` in the host view)
stayed readable; such files are hidden one by one too (``files``: an empty file over each).
"""

from __future__ import annotations

import glob
import os
import threading
from collections.abc import Iterable

_lock = threading.Lock()
_folders: list[str] = []
#: Registered paths that are no folder: a file or a glob, matched again when they or their folder change (``_matched``).
_paths: list[str] = []


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
            if path is None:
                continue
            if (folder := folder_of(path)) not in _folders:
                _folders.append(folder)
            full = os.path.abspath(os.path.expanduser(os.fspath(path)))
            if full != folder and full not in _paths:  # a file or a glob: its files too (module doc)
                _paths.append(full)


def hidden() -> list[str]:
    """The folders registered so far, then the folders the registered globs match now. Why the
    latter: ``files`` takes regular files only, and a glob's own folder may be one that is never
    hidden (``/usr/local/share/run-*`` matching the folder ``run-1`` that holds the dataset), so
    a folder it matched stayed in the samples' view."""
    return _hidden(_matched()[0])


def files() -> list[str]:
    """The regular files the registered file paths and globs name now, links followed: what to
    hide one by one where their folder is not hidden (module doc)."""
    return list(_matched()[1])


def _hidden(matched: list[str]) -> list[str]:
    with _lock:
        folders = list(_folders)
    seen = set(folders)
    return folders + [m for m in matched if m not in seen]


#: (registered paths, their folders' modification times) -> what ``_matched`` found for them.
_found: dict[tuple[tuple[str, ...], tuple[int, ...]], tuple[list[str], list[str]]] = {}


def _stamp(path: str) -> int:
    """The modification time (ns) of ``path``'s folder (``folder_of``): a file made or removed
    there changes it; -1 where it is not there."""
    try:
        return os.stat(folder_of(path)).st_mtime_ns
    except OSError:
        return -1


def _matched() -> tuple[list[str], list[str]]:
    """(the folders the registered globs match, the regular files the registered paths and globs
    name, links followed), each path listed once. Matched again only when a registered path or its
    folder changed: each sample's launch asks, and a glob over 20k shards took ~0.4 s a launch.
    Not seen until then: a file made in a subfolder of a glob's folder, or within the file
    system's timestamp tick of the last match (the run's dataset is there before it starts)."""
    with _lock:
        paths = tuple(_paths)
    key = (paths, tuple(_stamp(p) for p in paths))
    if (known := _found.get(key)) is not None:
        return known
    matched = _glob(paths)
    with _lock:
        _found.clear()  # one entry: the paths registered now
        _found[key] = matched
    return matched


def _glob(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    """``_matched``'s work: one glob per path, linear in its matches."""
    folders: dict[str, None] = {}  # ordered
    found: dict[str, None] = {}
    for path in paths:
        magic = glob.has_magic(path)
        for match in sorted(glob.glob(path)) if magic else [path]:
            real = os.path.realpath(match)
            if os.path.isfile(real):
                found[real] = None
            elif magic and os.path.isdir(real):
                folders[match] = None
    return list(folders), list(found)


def state() -> tuple[tuple[str, bool], ...]:
    """Each registered folder (and each a glob matches) and whether it exists now, then each
    registered file: a launch built before the run made its output_dir (the setup check) is
    built again once it exists, so the folder is then hidden."""
    folders, found = _matched()
    return tuple((folder, os.path.isdir(folder)) for folder in _hidden(folders)) + tuple((f, True) for f in found)
