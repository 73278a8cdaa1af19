"""Learning-rate schedules (constant, linear, cosine, each with linear warmup) as one pure function.

Why a pure function of the applied-update count rather than a stateful scheduler object: every
backend already checkpoints its optimizer's own update counter (torch AdamW's per-parameter
``step``, MLX's ``optimizer.step``), so deriving the lr from it makes a resumed run use exactly the
lr an uninterrupted run would, with no extra state to save, and torch and MLX share one formula.
The multipliers follow 🤗 transformers' ``get_*_schedule_with_warmup`` (``lr_lambda(k)`` is the
factor for the update that follows ``k`` applied ones); ``min_lr_ratio`` is the floor the decay
ends at, as in transformers' ``get_cosine_with_min_lr_schedule_with_warmup`` (``min_lr_rate``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

SCHEDULES = ("constant", "linear", "cosine")


def lr_multiplier(updates: int, schedule: str, warmup_steps: int, total_steps: int | None,
                  min_lr_ratio: float = 0.0) -> float:
    """The factor of the base lr for the update after ``updates`` applied ones."""
    if warmup_steps > 0 and updates < warmup_steps:
        return updates / warmup_steps
    if schedule == "constant":
        return 1.0
    total = max(int(total_steps or 0), warmup_steps)
    progress = (updates - warmup_steps) / max(1, total - warmup_steps)
    progress = min(max(progress, 0.0), 1.0)
    if schedule == "linear":
        decay = 1.0 - progress
    elif schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {SCHEDULES}")
    return min_lr_ratio + (1.0 - min_lr_ratio) * decay


def lr_at(optimizer: Any, updates: int) -> float:
    """The lr (``OptimizerConfig``) for the update after ``updates`` applied ones."""
    return optimizer.lr * lr_multiplier(updates, optimizer.schedule, optimizer.warmup_steps,
                                        optimizer.total_steps, optimizer.min_lr_ratio)


def updates_in_history(lines: Iterable[Mapping[str, Any]], updates_per_step: int) -> int:
    """The optimizer updates the step lines of metrics.jsonl record as applied, for a checkpoint
    written before it saved its own count (by a polyrl that also took no optimizer step on a step
    with nothing to train, so skipped lines count none): ``updates_per_step`` (``num_iterations`` x
    ``minibatches``) for each step not skipped (a step whose update a backend skipped part-way
    counts none; its earlier updates are lost)."""
    return sum(updates_per_step for line in lines if not line.get("skipped"))
