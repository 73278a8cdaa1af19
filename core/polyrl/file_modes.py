"""Ordinary permissions on the files polyrl writes.

Why: ``safetensors.save_file`` and ``tempfile.mkdtemp`` create owner-only files and folders
(0600/0700), so a checkpoint or a final model came out readable by its owner alone, unlike every
other file of the run, and a teammate or a serving account could not load it. Folders polyrl
writes get the modes a plain ``open``/``mkdir`` would give under the process's umask.
"""

from __future__ import annotations

import os
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it where the OS says it (Linux); elsewhere by
    setting and restoring it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def honour_umask(folder: Path) -> None:
    """Give ``folder`` and every file and folder under it the umask's ordinary mode (0644/0755 under
    the usual 022); links are left alone, hard links too: such a file is named elsewhere as well (a
    checkpoint's link of the user's KL reference, ``kept_inputs``), and its mode is that file's,
    its owner's to choose. Why: a chmod of the link is a chmod of the user's file, which made a
    model kept 0640 (or 0600) outside output_dir world-readable."""
    umask = current_umask()
    folder.chmod(0o777 & ~umask)
    for path in folder.rglob("*"):
        if path.is_symlink():
            continue
        if not path.is_dir() and path.stat().st_nlink > 1:
            continue
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
