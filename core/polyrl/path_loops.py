"""Which symlink loop keeps a path from being followed.

Why: ``Path.exists`` and ``Path.is_file`` read a loop (links pointing at each other, never at a
file) as no file at all, so a config, ``data.path`` or a reward's ``file.py`` caught in one was
"not found" while ``ls`` lists it; the error says it is a loop instead.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

#: The fix for a path caught in a symlink loop.
LOOP_FIX = "remove or repoint the looping symlink (ls -l shows where each link points)"


def symlink_loop(path: str | os.PathLike[str]) -> str:
    """Why ``path`` cannot be followed ("" when it can, or is missing for another reason): the
    path itself leads into a loop, or a folder on its way is one."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return ""
        try:
            os.lstat(path)
        except OSError:
            return "a folder on its path is a symlink loop"
        return "it leads into a symlink loop (links pointing back at each other, never at a file)"
    except ValueError:  # a NUL in the name: the path-text checks name it
        return ""
    return ""


def missing_problem(path: Path) -> str:
    """What to say of a path that is no file: "is a folder", a symlink loop, else "not found"."""
    loop = symlink_loop(path)
    if loop:
        return f"cannot be followed: {loop}"
    return "is a folder" if path.is_dir() else "not found"
