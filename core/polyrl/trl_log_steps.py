"""When a ``polyrl.trl.GRPOTrainer`` run logs, and what: transformers' ``logging_strategy``,
``logging_steps`` and ``logging_first_step`` for ``on_log``, ``state.log_history`` and the
``report_to`` trackers, each log the mean of the steps since the last one.

Why: transformers' ``DefaultFlowCallback`` asks a log (``control.should_log``) only every
``logging_steps`` optimizer updates (TRL's default 10), at the first with ``logging_first_step``,
at each epoch's end under ``"epoch"``, never under ``"no"``, and TRL's ``GRPOTrainer.log`` averages
its metrics over the steps since the last log. polyrl logged every step, so a TRL user's
dashboards, ``on_log`` callbacks and ``log_history`` got ten times the points, each one step's
noise. metrics.jsonl keeps every step: it is polyrl's own record, which a resume reads.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

#: keys a log takes from the window's last step, as transformers logs them: the state's
#: ``epoch`` and token count, the learning rate and gradient norm of the last update
LAST = frozenset({"step", "epoch", "num_tokens", "lr", "learning_rate", "grad_norm"})
#: keys averaged with their NaNs, as transformers' ``loss`` is the window's summed loss over its updates
WITH_NAN = frozenset({"loss"})


def strategy(args: Any, kind: str = "logging") -> str:
    """TRL's ``<kind>_strategy`` as a plain string (an enum's value); ``"steps"`` when unset."""
    return str(getattr(args, f"{kind}_strategy", "steps")).lower().rpartition(".")[2]


def flow_logs(args: Any, logging_steps: Any, global_step: int, per_step: int) -> bool:
    """Whether ``DefaultFlowCallback.on_step_end`` asks a log at one of the ``per_step`` updates
    a polyrl step ending at ``global_step`` makes: the first update under ``logging_first_step``,
    a multiple of ``logging_steps`` (``state.logging_steps``) under ``logging_strategy`` "steps".
    ``args`` without ``logging_strategy`` (polyrl's own ``GRPOConfig``): every step, as polyrl logs."""
    if not hasattr(args, "logging_strategy"):
        return True
    first = global_step - per_step + 1
    if bool(getattr(args, "logging_first_step", False)) and first <= 1 <= global_step:
        return True
    if strategy(args) != "steps" or not isinstance(logging_steps, numbers.Real) or logging_steps <= 0:
        return False
    every = int(float(logging_steps))
    return every > 0 and global_step // every > (first - 1) // every


def logs_at_epoch_end(args: Any) -> bool:
    """Whether ``DefaultFlowCallback.on_epoch_end`` asks a log: ``logging_strategy`` "epoch"."""
    return strategy(args) == "epoch"


def logs_line(args: Any, logging_steps: Any, line: Mapping[str, Any], per_step: int) -> bool:
    """Whether transformers' flow logs at the step of ``line`` (a metrics.jsonl step line): at
    ``logging_steps`` or the first update (``flow_logs``), or at an epoch's end under
    ``logging_strategy`` "epoch" (the line's ``epoch`` a whole number)."""
    step, epoch = line.get("step"), line.get("epoch")
    if not isinstance(step, numbers.Integral):
        return False
    ended = isinstance(epoch, (int, float)) and float(epoch).is_integer() and epoch > 0
    return flow_logs(args, logging_steps, int(step) * per_step, per_step) or (ended and logs_at_epoch_end(args))


def window_mean(lines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One log of the steps ``lines`` (metrics.jsonl lines, oldest first): each number the mean of
    the steps that have it, NaNs left out (NaN where every one is NaN, which ``log_history`` writes
    as None, as TRL's ``log`` does), ``loss`` with them (a non-finite step's loss stays visible),
    ``LAST``'s keys and anything not a number the last step's, an evaluation's (``eval/``) the last
    step's only: its own entry logs it (``trl_callbacks``)."""
    lines = list(lines)
    out: dict[str, Any] = {}
    values: dict[str, list[float]] = {}
    for line in lines:
        for key, value in line.items():
            if key in LAST or key.startswith("eval/") or not _number(value):
                continue
            values.setdefault(key, []).append(float(value))
            out.setdefault(key, None)
    last = lines[-1] if lines else {}
    for key, numbers_ in values.items():
        kept = numbers_ if key in WITH_NAN else [v for v in numbers_ if not math.isnan(v)]
        out[key] = math.fsum(kept) / len(kept) if kept else math.nan
    for key, value in last.items():
        if key in LAST or key.startswith("eval/") or not _number(value):
            out[key] = value
    for line in lines[:-1]:  # a key only earlier steps had that is not a number: kept, as the mean keeps numbers
        for key, value in line.items():
            if key not in out and not key.startswith("eval/"):
                out[key] = value
    return out


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def replayed(history: Iterable[Mapping[str, Any]], args: Any, logging_steps: Any,
             per_step: int, logged_steps: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """The logs a resumed run's ``log_history`` holds before it, rebuilt from ``history``
    (metrics.jsonl's step lines), each the mean of its window (``window_mean``), at its last step.
    ``logged_steps``: the steps the run logged at, as its checkpoint kept them
    (``TrlCallbacks.checkpoint_state``), a callback's ``should_log`` set or cleared included, as
    transformers' ``trainer_state.json`` keeps each log; None (a checkpoint written before they were
    kept): where transformers' flow logs. Why not every line: the uninterrupted run logged these only."""
    out: list[dict[str, Any]] = []
    window: list[Mapping[str, Any]] = []
    ends = None if logged_steps is None else set(logged_steps)
    for line in history:
        step = line.get("step")
        if not isinstance(step, numbers.Integral):
            continue
        window.append(line)
        logs = int(step) in ends if ends is not None else logs_line(args, logging_steps, line, per_step)
        if logs:
            out.append(window_mean(window))
            window = []
    return out
