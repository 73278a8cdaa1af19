"""The completions table TRL shows with each log, for a run from a TRL script's config.

Why: with ``log_completions=True`` TRL's ``GRPOTrainer.log`` prints a sample of its latest
completions with ``rich`` (``num_completions_to_print`` of them, all when None), writes them to
``output_dir/completions/completions_{global_step:05d}.parquet`` and sends the table to W&B and
trackio; a TRL user watching the terminal, or a script reading those files, found nothing under
polyrl. The console table is drawn by TRL's own ``print_prompt_completions_sample``, so it looks as
it does in TRL; without ``rich`` installed TRL prints nothing, and so does this. ``follow`` sets all
of it on a run's trackers, for ``polyrl.trl.GRPOTrainer`` and ``polyrl.api.run`` alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from polyrl.logs import get_logger

log = get_logger("polyrl.trl")

#: what ``RunTracking.show_completions`` is called with: the records and TRL's ``global_step``
Printer = Callable[[Sequence[Mapping[str, Any]], int], None]


def follow(tracking: Any, args: Any, *, logs_at: Callable[[Mapping[str, Any]], bool] | None = None,
           file_scale: int = 1) -> None:
    """Set ``tracking`` (a ``RunTracking``) to show the completions table as TRL's ``args`` ask: only
    with ``log_completions`` (polyrl's own ``GRPOConfig`` has none: every log), each prompt once with
    ``log_unique_prompts``, printed and written to parquet with each log. ``logs_at``: for a run
    without TRL's logs (``polyrl.api.run``), which step lines are logs (``RunTracking.table_at``);
    ``file_scale``: TRL's ``global_step`` per step the trackers count, for the file's name."""
    tracking.log_completions = bool(getattr(args, "log_completions", True))
    tracking.unique_prompts = bool(getattr(args, "log_unique_prompts", False))
    tracking.table_at = logs_at
    shows = [show for show in (printer(args), parquet_writer(args, tracking, file_scale)) if show is not None]
    if getattr(args, "log_completions", False) and tracking.writer:  # rewound with completions.jsonl on a resume
        tracking.parquet_folder, tracking.parquet_scale = Path(tracking.output_dir) / "completions", file_scale

    def show_all(records: Sequence[Mapping[str, Any]], step: int) -> None:
        for show in shows:
            show(records, step)

    tracking.show_completions = show_all if shows else None
    tracking.eval_latest = eval_latest(args)
    follow_evaluation(tracking, args, file_scale=file_scale)


def follow_evaluation(tracking: Any, args: Any, metric_key_prefix: str = "eval", file_scale: int = 1) -> None:
    """Set ``tracking`` to print an evaluation's completions and write them to parquet as
    ``{metric_key_prefix}_completions_{global_step:05d}.parquet`` in the script's ``output_dir``
    (``trainer.evaluate()``'s trainer has a scratch one). Why a name of its own: TRL writes it to the
    training file's name, ``completions_{global_step:05d}``, so at a step that logs and evaluates the
    evaluation's rows replaced the training ones; and with the metrics' prefix, as ``evaluate()`` of
    several named sets (``eval_a_...``, ``eval_b_...``) wrote one name each time, the last set's only."""
    shows = [show for show in (printer(args), parquet_writer(args, tracking, file_scale,
                                                             f"{metric_key_prefix}_completions",
                                                             getattr(args, "output_dir", None)))
             if show is not None]

    def show_eval(records: Sequence[Mapping[str, Any]], step: int) -> None:
        for show in shows:
            show(records, step)

    tracking.show_eval_completions = show_eval if shows else None


def eval_latest(args: Any) -> int | None:
    """How many of an evaluation's latest records TRL's ``log`` shows after it: its ``_logs``, which
    the evaluation's batches filled, hold the latest ``generation_batch_size`` completions (a deque
    of that length); None (all) where that is unset. The console draws ``num_completions_to_print``
    of them (``printer``); TRL's Advantage column (each eval group's normalized rewards) is left out
    there and NaN in the parquet file, as polyrl's evaluation computes none (``print_records``)."""
    size = getattr(args, "generation_batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def parquet_writer(args: Any, tracking: Any, file_scale: int = 1, prefix: str = "completions",
                   output_dir: str | None = None) -> Printer | None:
    """What writes each log's table to ``output_dir/completions`` as TRL does (``frame``), as
    ``{prefix}_{global_step:05d}.parquet``, or None: not asked (``log_completions``), or not the
    writing rank, or no folder for it (a warning: a copy of the table must never cost the run). The
    folder is made now, as TRL's ``GRPOTrainer`` makes it when built. ``output_dir``: the folder's
    parent where not the run's (``tracking.output_dir``)."""
    if not getattr(args, "log_completions", False) or not tracking.writer:
        return None
    folder = Path(output_dir or tracking.output_dir) / "completions"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("no completions parquet files for this run: their folder could not be made (completions.jsonl "
                    "and the trackers still get the table)", folder=str(folder), error=f"{type(exc).__name__}: {exc}")
        return None
    said: list[bool] = []

    def write(records: Sequence[Mapping[str, Any]], step: int) -> None:
        global_step = step * file_scale
        try:
            frame(records, global_step).to_parquet(folder / f"{prefix}_{global_step:05d}.parquet")
        except Exception as exc:  # noqa: BLE001 - a copy of the table must never cost the run
            if not said:
                said.append(True)
                log.warning("the completions table could not be written to parquet (said once; completions.jsonl "
                            "and the trackers still get it)", folder=str(folder), error=f"{type(exc).__name__}: {exc}")

    return write


def frame(records: Sequence[Mapping[str, Any]], global_step: int) -> Any:
    """``records`` as TRL's parquet table (a pandas ``DataFrame``, TRL's own dependency): ``step``
    (``global_step`` in each row), ``prompt``, ``completion`` (a chat's as TRL's list of messages),
    one column of scores per reward (NaN where none), the ``log_extra`` columns, ``advantage``."""
    import pandas as pd

    rewards, extra, advantages = _columns(records)
    table: dict[str, list[Any]] = {
        "step": [global_step] * len(records),
        "prompt": [r["prompt"] for r in records],
        "completion": [_as_trl_completion(r["prompt"], r["completion"]) for r in records],
        **rewards, **extra, "advantage": advantages,
    }
    return pd.DataFrame(table)


def _columns(records: Sequence[Mapping[str, Any]]) -> tuple[dict[str, list[float]], dict[str, list[Any]], list[float]]:
    """The columns TRL's table has besides prompt and completion: each reward's scores (NaN where
    none), each ``log_extra`` column's values (None where a record lacks it), the advantages."""
    names = list(dict.fromkeys(name for r in records for name in r.get("rewards", {})))
    columns = list(dict.fromkeys(name for r in records for name in (r.get("extra") or {})))
    return ({name: [_score(r.get("rewards", {}).get(name)) for r in records] for name in names},
            {c: [(r.get("extra") or {}).get(c) for r in records] for c in columns},
            [_score(r.get("advantage")) for r in records])


def _as_trl_completion(prompt: Any, completion: Any) -> Any:
    """A single-turn completion of a chat prompt as TRL keeps it: one assistant message (polyrl's
    record holds its text); text prompts' and multi-turn episodes' (messages already) as they are."""
    if isinstance(prompt, list) and isinstance(completion, str):
        return [{"role": "assistant", "content": completion}]
    return completion


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
    reward's score, the advantage and the ``log_extra`` columns; ``count`` of them drawn as TRL draws.
    A chat prompt's completion goes as TRL's one assistant message (``_as_trl_completion``), which TRL
    draws under an ASSISTANT heading, as the parquet table holds it. Records without an advantage
    (an evaluation's: ``eval_printer``) draw no Advantage column, as TRL draws none given None."""
    from trl.trainer.utils import print_prompt_completions_sample

    rewards, extra, advantages = _columns(records)
    print_prompt_completions_sample([r["prompt"] for r in records],
                                    [_as_trl_completion(r["prompt"], r["completion"]) for r in records], rewards,
                                    advantages if any("advantage" in r for r in records) else None,
                                    global_step, count, extra=extra)


def _score(value: Any) -> float:
    """A record's score as TRL's table holds it: NaN where none was given (a record's None: the
    reward returned None for it, or a NaN written as JSON's null)."""
    return float("nan") if value is None else float(value)
