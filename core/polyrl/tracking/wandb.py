"""Weights & Biases in offline mode: a ``wandb sync``-able run folder under ``output_dir/wandb``,
no account and no network. Completions are a ``wandb.Table`` per step."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.tracking.completions import COLUMNS, cell
from polyrl.tracking.spec import TrackerContext


class WandbTracker:
    def __init__(self, context: TrackerContext) -> None:
        import wandb

        self._wandb = wandb
        # offline unless the user chose a mode; telemetry to sentry off either way
        mode: Any = os.environ.get("WANDB_MODE", "offline")  # wandb checks the value itself
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        self.dir = context.output_dir
        self.run = wandb.init(project=context.project, name=context.run_name, dir=str(context.output_dir),
                              config=dict(context.config), mode=mode,
                              settings=wandb.Settings(console="off", x_disable_stats=True))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        table = self._wandb.Table(columns=list(COLUMNS), data=[[cell(r[c]) for c in COLUMNS] for r in records])
        self.run.log({"completions": table}, step=step)

    def close(self) -> None:
        self.run.finish()

    def close_failed(self) -> None:
        self.run.finish(exit_code=1)
