"""Path settings no file system can hold, refused as the config is read.

Why: ``os.stat`` raises on a name with a NUL character (``ValueError: embedded null byte``) and on a
component past the file system's name limit, or on a whole path past the system's path limit
(both ``OSError: [Errno 36] File name too long``), where ``Path.exists`` answers False only for a
missing file. ``model.path``, ``train.output_dir``,
``model.reference_path`` and ``generation.max_model_path`` of either kind were tracebacks from
deep inside the model lookup or the run lock instead of one ``error:`` line.
"""

from __future__ import annotations

import os
import re
import unicodedata
from typing import Any

from polyrl.errors import ConfigError

#: Bytes in one file or folder name: Linux's and macOS's NAME_MAX (most file systems' limit).
NAME_MAX = 255


def path_max() -> int:
    """Bytes the system takes in one path, its closing NUL included (PATH_MAX: 4096 on Linux,
    1024 on macOS); a path of that many bytes or more is refused before any file system sees it."""
    try:
        return int(os.pathconf("/", "PC_PATH_MAX"))
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no answer: Linux's
        return 4096


#: Bytes a run's files lie below ``train.output_dir`` (``checkpoints/.tmp-step-00000001/engine_state/``
#: and a backend's file name), kept free of the path limit: a folder just under it took the
#: config and then failed at its own ``.polyrl.lock`` (an OSError traceback) or a checkpoint.
OUTPUT_ROOM = 256


def check_path_text(value: Any, field: str, room: int = 0) -> None:
    """``value`` (a path string, or a list of them; anything else is left to the type checks) names
    nothing any file system could hold: one ConfigError naming ``field``. ``room``: bytes of the
    paths written below it (``OUTPUT_ROOM`` for a folder a run writes into) that must fit too."""
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, str):
            continue
        if "\0" in item:
            raise ConfigError(f"{item!r} holds a NUL character, which no file or folder name can", field=field,
                              fix="remove it from the path")
        size, limit = len(item.encode("utf-8", "surrogatepass")), path_max()
        if size + room >= limit:  # each name may be short: the kernel refuses the whole (ENAMETOOLONG)
            below = f" and the files written below it up to {room} more," if room else ""
            raise ConfigError(f"is a path of {size} bytes ({item[:20]!r}...),{below} longer than the {limit - 1} the "
                              "system takes in one path", field=field,
                              fix="use a shorter path (a symlink to the deep folder, or a folder nearer the root)")
        for part in item.split(os.sep):
            size = len(part.encode("utf-8", "surrogatepass"))  # never raises (a lone surrogate from Python)
            if size > NAME_MAX:
                raise ConfigError(f"has a name of {size} bytes ({part[:20]!r}...), longer than the {NAME_MAX} a "
                                  "file system allows in one file or folder name", field=field,
                                  fix=f"shorten that name to at most {NAME_MAX} bytes between slashes")
        _refuse_unexpanded(item, field)


#: A shell variable as written in a path: ``$HOME`` or ``${DATA_DIR}``.
_VARIABLE = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def _refuse_unexpanded(item: str, field: str) -> None:
    """``"$HOME/runs"`` in a path setting that names nothing as written: one ConfigError. Why: TOML
    (and a single-quoted ``--set``) has no variables, so the run wrote to a folder literally named
    ``$HOME`` in the working directory, or its data was "not found" with the variable still in it.
    A path whose name holding the ``$`` exists (a folder "$HOME" made on purpose) is taken as it is."""
    found = _VARIABLE.search(item)
    if found is None:
        return
    end = item.find(os.sep, found.end())
    if os.path.lexists(os.path.expanduser(item if end < 0 else item[:end])):  # the name holding it exists
        return
    how = (f'--set {field}="{item}" in double quotes on the command line, which the shell expands'
           if "." in field and not field.startswith("-") else "the path in double quotes, which the shell expands")
    raise ConfigError(f"{item!r} holds {found[0]}, which nothing expands: polyrl reads it as part of the name",
                      field=field, fix=f"write the path itself (a leading ~ is the home folder), or give {how}")


def refuse_control_chars(value: Any, field: str) -> None:
    """A control character (a line break, a tab, ESC) in a name polyrl makes a folder or a tracker's
    run of (``train.output_dir``, ``logging.run_name``): one ConfigError naming it. Why: a Windows-style
    ``"runs\\new"`` in a double-quoted TOML string is "runs", a line break and "ew": the run wrote
    to that folder without a word, and the name broke every log line and shell command it was in."""
    if not isinstance(value, str):
        return
    for at, char in enumerate(value):
        if unicodedata.category(char) == "Cc":
            raise ConfigError(f"{value!r} holds a control character (U+{ord(char):04X}) at character {at + 1}",
                              field=field, fix="remove it; in a double-quoted TOML string a backslash starts an "
                                               "escape (\\n is a line break, \\t a tab): write / between folders, "
                                               "or single quotes for the text as it is")


def refuse_empty_path(value: str, field: str, example: str) -> None:
    """A path argument that is empty or blank (``"$OUT"`` with OUT unset): one ConfigError naming
    ``field``. Why: ``Path("")`` is ``.``, so ``polyrl convert M ""`` wrote the model into the current
    folder (refused as "destination '' exists and is not empty" when it held anything) and
    ``polyrl report ""`` drew whatever run the current folder held."""
    if not value.strip():
        raise ConfigError(f"names no path ({value!r}: an unset shell variable reads so)", field=field,
                          fix=f"give the path, e.g. {example}")
