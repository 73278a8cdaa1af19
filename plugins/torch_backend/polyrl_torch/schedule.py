"""The scheduled learning rate on the torch optimizer (``polyrl.schedules`` holds the formula).

The count of applied updates is read from AdamW's own per-parameter ``step`` state, which the
checkpoint already saves, so a resumed run continues the schedule exactly where it stopped.
"""

from __future__ import annotations

import torch

from polyrl.schedules import lr_at


def applied_updates(optimizer: torch.optim.Optimizer) -> int:
    """Updates AdamW has applied (0 before the first; skipped steps do not count)."""
    for state in optimizer.state.values():
        if "step" in state:
            return int(state["step"])
    return 0


def apply_scheduled_lr(engine) -> float:
    """Set every param group's lr for the coming update and return it."""
    optimizer = engine.require_optimizer()
    lr = lr_at(engine.config.optimizer, applied_updates(optimizer))
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr
