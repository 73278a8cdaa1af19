"""Weights & Biases in offline mode: a ``wandb sync``-able run folder under ``output_dir/wandb``,
no account and no network. Completions are a ``wandb.Table`` per step. A TRL script's run
(``TrackerContext.trl``) is laid out as transformers' ``WandbCallback`` lays it out: every metric
plotted against ``train/global_step``, logged with each entry, the end-of-training numbers
(``train_runtime``, ``train_loss``...) in the run summary, not the history, and the project
``$WANDB_PROJECT`` (default ``huggingface``), the run named and configured as that callback does it
(``run_identity``). ``$WANDB_LOG_MODEL=end`` (or ``checkpoint``) logs the trained model as the
artifact that callback logs at the end of training."""

from __future__ import annotations

import numbers
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from polyrl.logs import get_logger
from polyrl.tracking.completions import EVAL_COLUMNS, EVAL_TABLE, table
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
        self._context = context
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
        columns, rows = table(records)
        names: list[str | int] = [*columns]  # wandb's type for a column's name
        self.run.log({"completions": self._wandb.Table(columns=names, data=rows)}, step=step)

    def log_eval_completions(self, records: Sequence[Mapping[str, Any]], step: int) -> None:
        """An evaluation's completions, a ``wandb.Table`` under ``eval_completions``."""
        columns, rows = table(records, EVAL_COLUMNS)
        names: list[str | int] = [*columns]
        self.run.log({EVAL_TABLE: self._wandb.Table(columns=names, data=rows)}, step=step)

    def close(self) -> None:
        self._finish(0)

    def close_stopped(self) -> None:
        """Ctrl-C or SIGTERM before the last step: exit code 255, what wandb itself records for a
        script a Ctrl-C ends (``ExitHooks``), so the run reads failed, not finished (exit code 0
        read as a run that took all its steps). The model the stop exported is still logged."""
        self._finish(STOPPED_EXIT_CODE)

    def _finish(self, exit_code: int) -> None:
        try:
            if os.environ.get("WANDB_LOG_MODEL") in LOG_MODEL:
                self._log_final_model()
        finally:  # an artifact that fails (a full disk, an unreadable file) still ends the run: nothing else lost
            self.run.finish(exit_code=exit_code)

    def _log_final_model(self) -> None:
        """The trained model's folder (``output_dir/model``, exported before the trackers close) as
        the W&B artifact transformers' ``WandbCallback.on_train_end`` logs under ``$WANDB_LOG_MODEL``:
        type ``model``, alias ``final_model``, its metadata the run summary's numbers and
        ``final_model``. Why: a TRL user's ``WANDB_LOG_MODEL=end`` run ended without its model."""
        folder = self.dir / FINAL_MODEL_DIR
        if not folder.is_dir():  # a run that saved no model (stopped before its first step)
            get_logger("polyrl.tracking").warning(
                f"WANDB_LOG_MODEL={os.environ['WANDB_LOG_MODEL']}: no trained model in {folder} to log as a W&B "
                "artifact", fix="log the model you keep with wandb.Artifact(..., type='model') yourself")
            return
        metadata = {k: v for k, v in dict(self.run.summary).items()
                    if isinstance(v, numbers.Number) and not k.startswith("_")}
        artifact = self._wandb.Artifact(name=model_artifact_name(self.run, self._context), type="model",
                                        metadata={**metadata, "final_model": True})
        artifact.add_dir(str(folder))
        self.run.log_artifact(artifact, aliases=["final_model"])

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


#: the exit code wandb records for a script a Ctrl-C ends (its ``ExitHooks``): a stopped run's
STOPPED_EXIT_CODE = 255
#: ``$WANDB_LOG_MODEL`` values with which transformers' ``WandbCallback`` logs the trained model at the
#: end of training (``WandbLogModel.is_enabled``)
LOG_MODEL = frozenset({"end", "checkpoint"})
#: where polyrl's trainer exports the trained model (``Trainer.final_model_dir``)
FINAL_MODEL_DIR = "model"


def _is_output_dir(named: str, output_dir: Path) -> bool:
    """Whether a run name is the output_dir (transformers' default ``run_name``), as given: TRL's
    ``output_dir="run"`` names the folder the trainer holds as an absolute path (``run_paths``)."""
    return named == str(output_dir) or os.path.abspath(named) == os.path.abspath(output_dir)


def model_artifact_name(run: Any, context: TrackerContext) -> str:
    """The model artifact's name as ``WandbCallback`` names it: ``model-<run name>`` for a run named
    by ``args.run_name`` (other than ``output_dir``), else ``model-<run id>``; each character W&B
    refuses in a name (transformers passes them on and fails) is a ``-``."""
    named = context.trl_run.run_name if context.trl_run is not None else context.run_name if not context.trl else None
    name = f"model-{run.name}" if named and not _is_output_dir(named, context.output_dir) else f"model-{run.id}"
    # W&B takes only these characters in an artifact's name: a run name with a space or a slash
    # ("qwen 0.5b/grpo") raised ValueError there, and the run ended without its model
    return _ARTIFACT_UNSAFE.sub("-", name)


_ARTIFACT_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


#: transformers' ``WandbCallback`` variables polyrl does not act on: each value that turns one on there,
#: what transformers then does, and what to do instead
UNHONOURED = {
    "WANDB_LOG_MODEL": ({"checkpoint"},
                        "transformers' WandbCallback uploads each checkpoint as a W&B artifact; polyrl logs only the "
                        "trained model at the end (as WANDB_LOG_MODEL=end does)",
                        "log output_dir/checkpoints yourself with wandb.Artifact(..., type='model'), or set "
                        "WANDB_LOG_MODEL=end"),
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
