"""``metrics.jsonl``'s lines: one per training step, and one per evaluation outside a step.

Step numbers count the steps taken: the first step's line is ``step`` 1, like the checkpoint
written after it (``step-00000001``), the ``after_steps`` of an evaluation run after it, the
trackers' x axis and TRL's first logged ``global_step``. An evaluation during training sits on
its step's line. The evaluation before training is a line at step 0 and the one after training a
line at the last step (beside that step's own line), each marked ``phase`` (``before`` /
``after``, as in ``eval_completions.jsonl``), with the same ``eval/...`` keys.

Why a file from an earlier polyrl is renumbered rather than refused: its lines counted from 0 (the
line of step s held what the line of step s + 1 holds now, its evaluation included), so resuming
it as it was would have logged two lines for one step and shifted the curves; only such a file
has a training line at step 0, which tells the two apart without a marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

FILE_NAME = "metrics.jsonl"
#: The ``phase`` of a line that holds an evaluation outside a step.
EVAL_PHASES = ("before", "after")


def eval_line(phase: str, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The line of the evaluation ``phase`` (before: at step 0; after: at the last step taken)."""
    return {"step": step, "phase": phase, **metrics}


def is_step_number(value: Any) -> TypeGuard[int]:
    """Whether ``value`` read from a log line is a step number: an int at least 0, not a bool.
    Why one helper for every reader: JSON's ``true`` is Python's ``True == 1``, so a hand-edited
    ``{"step": true}`` read as step 1 wherever a reader checked ``isinstance(value, int)`` alone."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def has_step(record: Any) -> bool:
    """Whether ``record`` is a line with a step number (``is_step_number``)."""
    return isinstance(record, dict) and is_step_number(record.get("step"))


def eval_phase(record: Mapping[str, Any]) -> str | None:
    """``before`` / ``after`` for an evaluation line, None for a training step's line."""
    phase = record.get("phase")
    return phase if phase in EVAL_PHASES else None


def counted_from_zero(records: Iterable[Any]) -> bool:
    """Whether the lines are an earlier polyrl's, numbered from 0: only those hold a training line
    at step 0 (step 0 is now the evaluation before training alone)."""
    return any(has_step(r) and r["step"] == 0 and eval_phase(r) is None for r in records)


def renumbered(records: Sequence[Any]) -> list[Any]:
    """An earlier polyrl's lines in today's numbering: each training line one step later, its
    ``eval/...`` keys with it (they were measured after that step)."""
    return [{**r, "step": r["step"] + 1} if has_step(r) and eval_phase(r) is None else r for r in records]


def rewound(records: Iterable[Any], step: int) -> list[dict[str, Any]]:
    """The lines a run resumed after ``step`` steps keeps, each once, in order: the evaluation
    before training (only once a step was taken: a run starting at step 0 evaluates again) and
    the lines of steps 1 to ``step``, each from its last writing (a crashed run, or the branch an
    earlier checkpoint was resumed from, wrote later ones). The evaluation after training is left
    out: the resumed run evaluates again at its end."""
    before: dict[str, Any] | None = None
    by_step: dict[int, dict[str, Any]] = {}
    for record in records:
        if not has_step(record):
            continue
        phase = eval_phase(record)
        if phase == "before" and step > 0:
            before = record
        elif phase is None and 1 <= record["step"] <= step:
            by_step[record["step"]] = record
    return ([before] if before is not None else []) + [by_step[k] for k in sorted(by_step)]
