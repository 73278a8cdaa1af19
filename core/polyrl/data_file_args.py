"""A data file's path passed to the Python API where a dataset is expected.

Why: ``prompts="train.jsonl"`` (or TRL's ``train_dataset=`` given a path) was refused as "one
string, which would be read as one prompt per character", with the fix "pass a list of prompts":
advice for a typo, not for a file the user meant to be read. The fix here gives the 🤗 datasets
call that reads it, as a TRL script does, and the TOML key that reads it in polyrl's CLI.
"""

from __future__ import annotations

import os
from pathlib import PurePath

from polyrl.errors import ConfigError

#: a data file's suffix -> the 🤗 datasets builder that reads it
BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".tsv": "csv", ".parquet": "parquet",
            ".arrow": "arrow"}


def data_file_error(value: str | bytes, field: str) -> ConfigError | None:
    """The error for a ``field`` given as the path of a data file (a known suffix, or a file that
    exists), else None (any other string)."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    if "\n" in text or len(text) > 4096:
        return None
    builder = BUILDERS.get(PurePath(text.strip()).suffix.lower())
    try:
        exists = os.path.isfile(text)
    except (OSError, ValueError):  # a NUL in the text, a name too long for the OS
        exists = False
    if builder is None and not exists:
        return None
    extra = ', sep="\\t"' if text.strip().lower().endswith(".tsv") else ""
    call = f'datasets.load_dataset("{builder or "json"}", data_files={text!r}{extra}, split="train")'
    return ConfigError(f"{field} is the path of a data file ({text!r}): the Python API takes the rows, not a path "
                       "(the string would be read as one prompt per character)", field=field,
                       fix=f"read it as a TRL script does: {field}={call} (or set data.path = {text!r} in a TOML "
                           "config for polyrl train)")


__all__ = ["BUILDERS", "data_file_error"]
