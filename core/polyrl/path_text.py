"""Path settings no file system can hold, refused as the config is read.

Why: ``os.stat`` raises on a name with a NUL character (``ValueError: embedded null byte``) and on a
component past the file system's name limit (``OSError: [Errno 36] File name too long``), where
``Path.exists`` answers False only for a missing file. ``model.path``, ``train.output_dir``,
``model.reference_path`` and ``generation.max_model_path`` of either kind were tracebacks from
deep inside the model lookup or the run lock instead of one ``error:`` line.
"""

from __future__ import annotations

import os
from typing import Any

from polyrl.errors import ConfigError

#: Bytes in one file or folder name: Linux's and macOS's NAME_MAX (most file systems' limit).
NAME_MAX = 255


def check_path_text(value: Any, field: str) -> None:
    """``value`` (a path string, or a list of them; anything else is left to the type checks) names
    nothing any file system could hold: one ConfigError naming ``field``."""
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, str):
            continue
        if "\0" in item:
            raise ConfigError(f"{item!r} holds a NUL character, which no file or folder name can", field=field,
                              fix="remove it from the path")
        for part in item.split(os.sep):
            size = len(part.encode("utf-8", "surrogatepass"))  # never raises (a lone surrogate from Python)
            if size > NAME_MAX:
                raise ConfigError(f"has a name of {size} bytes ({part[:20]!r}...), longer than the {NAME_MAX} a "
                                  "file system allows in one file or folder name", field=field,
                                  fix=f"shorten that name to at most {NAME_MAX} bytes between slashes")
