"""JSON columns that the first rows lack, in files 🤗 datasets cannot read: refused where the run needs them.

Why: 🤗 datasets takes a JSON-lines file's columns from its first block (about 10 MB); a column first
written past it (``"answer"`` only in the last rows) makes the file one datasets, and so TRL, cannot
load. polyrl reads such a file with a warning, each row as Python parses it, so every row before the
column's first line simply has no such key. A column the run reads (the prompt, a mapped column, a
reward's answer column or a reward function's parameter) then failed rows one at a time, at the first
step that drew them, or reached a reward as None: here it is one error before any model loads,
naming the column, its first line and the fix. A column nothing reads stays a warning.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from polyrl.errors import ConfigError


def first_rows(rows: Sequence[Any]) -> dict[str, int]:
    """{column: the first row holding it} for each column that row 0 lacks (dict rows only)."""
    if not rows or not isinstance(rows[0], Mapping):
        return {}
    seen = set(rows[0])
    late: dict[str, int] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            return late
        for key in row:
            if key not in seen:
                seen.add(key)
                late[key] = i
    return late


def refuse_needed(needed: Iterable[tuple[str, str]], late: Mapping[str, str], name: str) -> None:
    """Raise for the first ``(column, field)`` of ``needed`` whose column is in ``late``
    (``{column: where it first appears}``), ``field`` naming the setting that reads it."""
    for column, field in needed:
        if column in late:
            raise ConfigError(
                f"{name}: column {column!r}, which {field} reads, first appears at {late[column]}; the rows before "
                "it lack it (🤗 datasets, and so TRL, cannot read such a file: it takes the columns from the first "
                "MBs)", field=field,
                fix=f'name it in the first row (write "{column}": null in a row that has none), or move a row '
                    "that holds it to the top of the file")


def reward_columns(rewards: Sequence[Any], functions: Sequence[Callable[..., Any]]) -> list[tuple[str, str]]:
    """(column, field) for each column a ``[[rewards]]`` entry reads: a built-in answer reader's
    ``column`` option, ``code_tests``' ``column`` / ``setup_column``, and each parameter without a
    default of a reward function (``functions``: those of the entries with ``function``, in order)."""
    from polyrl.rewards.builtin import ANSWER_COLUMN, ANSWER_READERS

    out: list[tuple[str, str]] = []
    fns = iter(functions)
    for i, reward in enumerate(rewards):
        options = dict(reward.options or {})
        if reward.function:
            fn = next(fns, None)
            try:
                params = inspect.signature(fn).parameters.values() if fn is not None else ()
            except (TypeError, ValueError):  # a builtin or C callable: its binding check stands
                params = ()
            out += [(p.name, f"rewards[{i}].function") for p in params
                    if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        elif reward.name in ANSWER_READERS:
            out.append((options.get("column", ANSWER_COLUMN), f"rewards[{i}].options.column"))
        elif reward.name == "code_tests":
            out += [(options[key], f"rewards[{i}].options.{key}") for key in ("column", "setup_column")
                    if isinstance(options.get(key), str)]
            if "column" not in options:
                out.append(("tests", f"rewards[{i}].options.column"))
    return out
