"""The completions table TRL prints to the console with each log, for ``polyrl.trl.GRPOTrainer``.

Why: with ``log_completions=True`` TRL's ``GRPOTrainer.log`` prints a sample of its latest
completions with ``rich`` (``num_completions_to_print`` of them, all when None) besides sending the
table to W&B and trackio; a TRL user watching the terminal saw nothing under polyrl. The table is
drawn by TRL's own ``print_prompt_completions_sample``, so it looks as it does in TRL; without
``rich`` installed TRL prints nothing, and so does this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.logs import get_logger

log = get_logger("polyrl.trl")

#: what ``RunTracking.show_completions`` is called with: the records and TRL's ``global_step``
Printer = Callable[[Sequence[Mapping[str, Any]], int], None]


def printer(args: Any) -> Printer | None:
    """The console printer a TRL script's ``args`` asks (``log_completions``), or None: not asked,
    polyrl's own ``GRPOConfig`` (no such field), or ``rich`` missing (TRL prints nothing then)."""
    if not getattr(args, "log_completions", False):
        return None
    from transformers.utils import is_rich_available

    if not is_rich_available():
        return None
    count = getattr(args, "num_completions_to_print", None)
    said: list[bool] = []

    def show(records: Sequence[Mapping[str, Any]], global_step: int) -> None:
        try:
            print_records(records, global_step, count)
        except Exception as exc:  # noqa: BLE001 - a console table must never cost the run
            if not said:
                said.append(True)
                log.warning("the completions table could not be printed (said once; completions.jsonl and "
                            "the trackers still get it)", error=f"{type(exc).__name__}: {exc}")

    return show


def print_records(records: Sequence[Mapping[str, Any]], global_step: int, count: int | None) -> None:
    """``records`` (``polyrl.tracking.completions``) as TRL's console table: prompt, completion, each
    reward's score, the advantage and the ``log_extra`` columns; ``count`` of them drawn as TRL draws."""
    from trl.trainer.utils import print_prompt_completions_sample

    names = list(dict.fromkeys(name for r in records for name in r.get("rewards", {})))
    columns = list(dict.fromkeys(name for r in records for name in (r.get("extra") or {})))
    print_prompt_completions_sample(
        [r["prompt"] for r in records], [r["completion"] for r in records],
        {name: [_score(r.get("rewards", {}).get(name)) for r in records] for name in names},
        [_score(r.get("advantage")) for r in records], global_step, count,
        extra={c: [(r.get("extra") or {}).get(c) for r in records] for c in columns})


def _score(value: Any) -> float:
    """A record's score as TRL's table holds it: NaN where none was given (a record's None: the
    reward returned None for it, or a NaN written as JSON's null)."""
    return float("nan") if value is None else float(value)
