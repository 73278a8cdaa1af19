"""An answer column null (or empty text) in every row, refused where a built-in reward reads it.

Why: ``numeric_match`` and ``exact_match`` leave a row whose answer is null unscored, which is
right for a mixed set where some rows have none. A column null in every row (a Parquet column of
type null, JSON lines each writing ``"answer": null``, a CSV column left blank) passed every check,
``polyrl launch --dry-run`` included, and the run then scored nothing with that reward, step after
step: the same run as one whose data lacks the column, which is refused before any model loads.
A column of empty text ("" or spaces) in every row is the same to ``exact_match`` (an empty answer
is unscored) and an error at the first step to ``numeric_match``: refused alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from polyrl.errors import ConfigError


def answer_columns(rewards: Sequence[Any], eval_reward: str | None = None,
                   run_rewards: str = "run") -> list[tuple[str, str, str]]:
    """(reward, column, field) for each built-in answer reader: of the ``[[rewards]]`` entries,
    or (``eval_reward`` given) of what scores the held-out set: the run's rewards for
    ``run_rewards``, the entry labelled ``eval_reward`` with its options, else that reward with
    its default column (the field then ``eval.reward``)."""
    from polyrl.rewards.builtin import ANSWER_COLUMN, ANSWER_READERS

    if eval_reward is not None and eval_reward != run_rewards:
        same = next((i for i, r in enumerate(rewards) if r.label == eval_reward), None)
        if same is None:
            return [(eval_reward, ANSWER_COLUMN, "eval.reward")] if eval_reward in ANSWER_READERS else []
        return [(name, column, field) for name, column, field in answer_columns(rewards)
                if field.startswith(f"rewards[{same}].")]
    return [(r.name, dict(r.options or {}).get("column", ANSWER_COLUMN), f"rewards[{i}].options.column")
            for i, r in enumerate(rewards) if not r.function and r.name in ANSWER_READERS]


def refuse_null(readers: Iterable[tuple[str, str, str]], data: Any, what: str) -> None:
    """Raise for the first reader whose column ``data`` (a ``polyrl.data.Dataset``; ``what``
    names it in the error) holds as null in every row."""
    for reward, column, field in readers:
        kind = "null" if data.null_everywhere(column) else "null or empty text" if data.blank_everywhere(column) \
            else None
        if kind is not None:
            raise ConfigError(
                f"{what} ({data.name}): column {column!r}, which reward {reward!r} reads its answer from, is {kind} "
                f"in every one of its {len(data)} rows, so the reward would score none of them",
                field=field,
                fix=f"fill in the {column!r} column (a Parquet column of type null, or \"{column}\": null or \"\" on "
                    "every line, holds no answer), point the reward's option column at the column that holds the "
                    "answers, or remove the reward")
