"""Weights & Biases in offline mode: a ``wandb sync``-able run folder under ``output_dir/wandb``,
no account and no network. Completions are a ``wandb.Table`` per step. A TRL script's run
(``TrackerContext.trl``) is laid out as transformers' ``WandbCallback`` lays it out: every metric
plotted against ``train/global_step``, logged with each entry, the end-of-training numbers
(``train_runtime``, ``train_loss``...) in the run summary, not the history, and the project
``$WANDB_PROJECT`` (default ``huggingface``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.tracking.completions import COLUMNS, cell
from polyrl.tracking.spec import TrackerContext
from polyrl.trl_tags import WANDB_STEP_METRIC, WANDB_SUMMARY_KEYS


class WandbTracker:
    def __init__(self, context: TrackerContext) -> None:
        import wandb

        self._wandb = wandb
        # offline unless the user chose a mode; telemetry to sentry off either way
        mode: Any = os.environ.get("WANDB_MODE", "offline")  # wandb checks the value itself
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        self.dir = context.output_dir
        # a TRL run's project as transformers' WandbCallback names it (TRL's ``project`` is trackio's)
        project = os.environ.get("WANDB_PROJECT", "huggingface") if context.trl else context.project
        self.run = wandb.init(project=project, name=context.run_name, dir=str(context.output_dir),
                              config=dict(context.config), mode=mode,
                              settings=wandb.Settings(console="off", x_disable_stats=True))
        self._trl = context.trl
        if self._trl:  # transformers' x-axis: a TRL user's panels plot against it
            self.run.define_metric(WANDB_STEP_METRIC)
            self.run.define_metric("*", step_metric=WANDB_STEP_METRIC, step_sync=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if not self._trl:
            self.run.log(dict(metrics), step=step)
            return
        history = {}
        for key, value in metrics.items():  # tagged train/x by trl_tags: the summary's keys are bare
            bare = key.removeprefix("train/")
            if key.startswith("train/") and bare in WANDB_SUMMARY_KEYS:
                self.run.summary[bare] = value
            else:
                history[key] = value
        self.run.log({**history, WANDB_STEP_METRIC: step}, step=step)

    def log_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        table = self._wandb.Table(columns=list(COLUMNS), data=[[cell(r[c]) for c in COLUMNS] for r in records])
        self.run.log({"completions": table}, step=step)

    def close(self) -> None:
        self.run.finish()

    def close_failed(self) -> None:
        self.run.finish(exit_code=1)
