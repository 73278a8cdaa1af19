"""Weights & Biases in offline mode: a ``wandb sync``-able run folder under ``output_dir/wandb``,
no account and no network. Completions are a ``wandb.Table`` per step. A TRL script's run
(``TrackerContext.trl``) is laid out as transformers' ``WandbCallback`` lays it out: every metric
plotted against ``train/global_step``, logged with each entry, the end-of-training numbers
(``train_runtime``, ``train_loss``...) in the run summary, not the history, and the project
``$WANDB_PROJECT`` (default ``huggingface``), the run named and configured as that callback does it
(``run_identity``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.logs import get_logger
from polyrl.tracking.completions import COLUMNS, cell
from polyrl.tracking.spec import POLYRL_CONFIG_KEY, TrackerContext
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
        name, config = run_identity(context)
        warn_unhonoured()
        self.run = wandb.init(project=project, name=name, dir=str(context.output_dir), config=config, mode=mode,
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


def run_identity(context: TrackerContext) -> tuple[str | None, dict[str, Any]]:
    """The W&B run's name and config. A TRL script's run (``context.trl_run``) is named and
    configured as transformers' ``WandbCallback`` does it: ``args.run_name`` (None, its default,
    lets W&B name the run), the model config and ``args.to_dict()`` (and ``model/num_parameters``)
    as the config, so a TRL user's filters and run tables (``learning_rate``, ``beta``...) find the
    run; polyrl's own config is kept under ``polyrl``. polyrl's own runs: ``run_name`` and the
    run config."""
    trl_run = context.trl_run
    if trl_run is None:
        return context.run_name, dict(context.config)
    return trl_run.run_name, {**trl_run.config, POLYRL_CONFIG_KEY: dict(context.config)}


#: transformers' ``WandbCallback`` variables polyrl does not act on: each value that turns one on there,
#: what transformers then does, and what to do instead
UNHONOURED = {
    "WANDB_LOG_MODEL": ({"end", "checkpoint"},
                        "transformers' WandbCallback uploads the model ('end': the trained one, 'checkpoint': each "
                        "checkpoint) as a W&B artifact; polyrl uploads no model to W&B",
                        "log output_dir/model (or its checkpoints) yourself with wandb.Artifact(..., type='model'), "
                        "or unset WANDB_LOG_MODEL"),
    "WANDB_WATCH": ({"all", "parameters", "gradients"},
                    "transformers' WandbCallback calls wandb.watch on the model (histograms of its parameters or "
                    "gradients); polyrl's model lives in its backend and is not watched",
                    "read the gradient norm polyrl logs each step (grad_norm), or unset WANDB_WATCH"),
}


def warn_unhonoured() -> None:
    """One warning for each of ``UNHONOURED`` set to a value that turns it on. Why: a TRL user's
    ``WANDB_LOG_MODEL=end`` ended the run without its model artifact and without a word."""
    for variable, (values, what, fix) in UNHONOURED.items():
        value = os.environ.get(variable)
        if value in values:
            get_logger("polyrl.tracking").warning(f"{variable}={value}: {what}", fix=fix)
