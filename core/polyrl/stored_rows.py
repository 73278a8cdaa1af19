"""A dataset row as its dataset holds it, for what reads the row rather than generates from it.

Why: ``data.system_prompt`` turns a row's prompt column into the chat the model is asked
(system message, then the row's prompt). Rewards read the row's columns by name, as TRL passes
them (``_calculate_rewards`` hands every column of the original row): with
``data.prompt_column = "question"``, a reward declaring ``question`` got that chat instead of the
row's own question, a silent misbinding. The row the trainer generates from keeps the chat in
its prompt column and the column's own value under ``SOURCE_PROMPT``; ``as_stored`` gives the
row back as the dataset holds it (for the rewards), ``as_asked`` the row as asked without that
key (for an environment's ``reset``, which builds the first messages from the prompt). An
environment whose class sets ``READS_STORED`` true gets the row with that key, to read both:
TRL's ``environment_factory`` runs ``reset(**row)`` with the row's own values (TRL passes the
dataset's row) while the model is asked the chat.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: (column, its own value) in a row whose prompt column holds the chat built for generation
SOURCE_PROMPT = "__polyrl_source_prompt__"
#: a class attribute: an environment class setting it true gets ``reset`` the row with ``SOURCE_PROMPT``
READS_STORED = "polyrl_reads_stored_row"


def with_asked(row: dict[str, Any], column: str, asked: Any) -> dict[str, Any]:
    """``row`` with ``asked`` (what the model is asked) in ``column``, that column's own value kept."""
    if asked != row[column]:
        row[SOURCE_PROMPT] = (column, row[column])
        row[column] = asked
    return row


def as_stored(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """``row`` with its prompt column's own value (not the chat built from it), and no ``SOURCE_PROMPT``."""
    if SOURCE_PROMPT not in row:
        return row
    column, value = row[SOURCE_PROMPT]
    out = {k: v for k, v in row.items() if k != SOURCE_PROMPT}
    out[column] = value
    return out


def as_asked(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """``row`` as the model is asked it (the chat in its prompt column), without ``SOURCE_PROMPT``:
    what an environment's ``reset`` builds its first messages from (a polyrl environment reads the
    prompt there, so ``data.system_prompt`` reaches the model through it)."""
    if SOURCE_PROMPT not in row:
        return row
    return {k: v for k, v in row.items() if k != SOURCE_PROMPT}


def for_reset(env: object, row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row ``env.reset`` gets: ``as_asked(row)``, or the row whole where ``env``'s class sets
    ``READS_STORED`` (it splits the row itself with ``as_asked`` and ``as_stored``)."""
    return row if getattr(type(env), READS_STORED, False) is True else as_asked(row)
