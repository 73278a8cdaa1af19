"""A dict of columns (``dataset[:n]``, ``Dataset.to_dict()``) passed where rows are expected.

Why: ``dataset[:100]`` on a 🤗 Dataset is ``{column: [values]}``, not 100 rows. Given as the
training prompts it was refused as "a dict of splits" whose fix (``dataset['prompt']``) dropped
every other column the rewards read; given as TRL's ``eval_dataset``, which takes a dict of named
sets, each column became a set of its own: the ``answer`` column's values evaluated as prompts,
unsaid (TRL fails on such rows: its rows are dicts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polyrl.errors import ConfigError

#: the 🤗 datasets types that are dicts of splits, never of columns
_SPLIT_DICTS = ("DatasetDict", "IterableDatasetDict")


def is_column_dict(value: Any, prompt_column: str | None = None) -> bool:
    """Whether ``value`` reads as a dict of columns: every value a list (or tuple) of one length
    whose items are not rows (dicts), and, when ``prompt_column`` is given, that column among its
    keys (a dict of named sets of text prompts has the same shape otherwise)."""
    if not isinstance(value, Mapping) or not value or type(value).__name__ in _SPLIT_DICTS:
        return False
    if prompt_column is not None and prompt_column not in value:
        return False
    columns = list(value.values())
    if not all(isinstance(c, (list, tuple)) for c in columns) or len({len(c) for c in columns}) != 1:
        return False
    return not any(isinstance(item, Mapping) for c in columns for item in c[:1])


def column_dict_error(value: Mapping[str, Any], field: str) -> ConfigError:
    """The error for ``is_column_dict(value)`` given as ``field``, with the call that gives rows."""
    names = ", ".join(repr(str(k)) for k in value)
    count = len(next(iter(value.values())))
    return ConfigError(f"{field} is a dict of columns ({names}; {count} value{'s' if count != 1 else ''} each), as "
                       "dataset[:n] and Dataset.to_dict() give, not a dataset of rows", field=field,
                       fix=f"pass rows: {field}=datasets.Dataset.from_dict(...), or dataset.select(range(n)) in place "
                           "of dataset[:n]")


def one_row_error(value: Any, field: str, prompt_column: str = "prompt") -> ConfigError | None:
    """The error for one row (``{"prompt": "...", "answer": ...}``) given as ``field``, where a
    list of rows is expected; None for any other value. Why: it was refused as "a dict of splits"
    (``'prompt', 'answer'``) with the fix ``dataset['prompt']``."""
    if not isinstance(value, Mapping) or type(value).__name__ in _SPLIT_DICTS or prompt_column not in value:
        return None
    prompt = value[prompt_column]
    chat = isinstance(prompt, (list, tuple)) and bool(prompt) and all(
        isinstance(m, Mapping) and "role" in m for m in prompt)
    if not isinstance(prompt, str) and not chat:
        return None
    return ConfigError(f"{field} is one row (a dict with the columns {', '.join(repr(str(k)) for k in value)}), where "
                       "a dataset of rows is expected", field=field,
                       fix=f"wrap it in a list: {field}=[{{{prompt_column!r}: ..., ...}}], one dict per row")


__all__ = ["column_dict_error", "is_column_dict", "one_row_error"]
