"""The tracker tags of a run trained through ``polyrl.trl.GRPOTrainer``: the names transformers'
TensorBoard, W&B, MLflow... callbacks give the same numbers in a TRL run.

Why: transformers sends each ``log`` through ``integration_utils.rewrite_logs`` before a tracker
sees it (``eval_x`` becomes ``eval/x``, ``test_x`` ``test/x``, anything else ``train/x``), so a TRL
user's dashboards and saved panels read ``train/loss``, ``train/reward``, ``eval/loss``; polyrl's
trackers got the bare keys (``loss``, ``reward``) and those panels stayed empty. polyrl's own runs
(``polyrl train``) keep their names: only the TRL layer sets this on its run's tracking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the end-of-training numbers transformers' ``WandbCallback`` puts in the W&B run summary (under
#: these bare names) instead of the history: one value a run, not a curve
WANDB_SUMMARY_KEYS = frozenset({"train_runtime", "train_samples_per_second", "train_steps_per_second",
                                "train_loss", "total_flos"})
#: the step axis transformers' ``WandbCallback`` logs with every entry and plots every metric against
WANDB_STEP_METRIC = "train/global_step"


def tag(key: str) -> str:
    """``key`` as transformers' ``rewrite_logs`` names it; a polyrl evaluation key (``eval/...``)
    is already the tag an ``eval_`` key becomes, and stays."""
    if key.startswith(("eval/", "test/")):
        return key
    for prefix in ("eval", "test"):
        if key.startswith(prefix + "_"):
            return f"{prefix}/{key[len(prefix) + 1:]}"
    return f"train/{key}"


def trl_tags(metrics: Mapping[str, Any], names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``metrics`` (a step's line, an evaluation's, the end-of-training numbers, or a script's own
    ``trainer.log``) under the tags a TRL run's trackers show: polyrl's keys with TRL's names added
    (``with_trl_names``; ``names`` the rewards' TRL names) and an evaluation's ``eval_`` names
    (``trl_eval_names``: ``eval/reward``...), each tagged as ``rewrite_logs`` tags it. ``step`` is
    the line's number, not a metric, and is left out."""
    from polyrl.rewards.trl_compat import with_trl_names
    from polyrl.step_metrics import trl_eval_names

    out = {tag(key): value for key, value in with_trl_names(metrics, names).items() if key != "step"}
    for key, value in trl_eval_names(metrics, names).items():
        out.setdefault(tag(key), value)
    return out
