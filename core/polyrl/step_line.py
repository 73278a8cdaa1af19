"""What a step's log line shows on the terminal: the numbers a person watches, not all ~40.

Why: the full step dict printed as one ~1,000-character line (throughput, clip regions and TRL's
duplicate names included) buried loss and reward. Every metric still goes to metrics.jsonl and
the trackers; ``logging.step_line = "full"`` prints them all as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

STEP_LINE_CHOICES = ("short", "full")

#: In this order on a short line, each where the step has it (kl only with a reference model);
#: TRL's names where a metric has two (``report.SUPERSEDED``), and throughput named for what it
#: counts (sampled tokens over generation time, not the whole step).
SHORT_KEYS = ("step", "loss", "reward_mean", "reward_std", "frac_reward_zero_std", "kl", "grad_norm", "lr",
              "entropy", "clip_fraction", "completions/mean_length", "completions/clipped_ratio", "samples_kept",
              "episode/turns_mean", "episode/tool_calls_mean", "episode/tool_error_share",
              "episode/env_reward_mean", "time/step", "perf/generate_tokens_per_s")


def step_line_fields(metrics: Mapping[str, Any], step_line: str = "short") -> dict[str, Any]:
    """The step's metrics to print, in order. Per-reward columns (``reward/<name>/...`` and TRL's
    ``rewards/<name>/...``) stay in the files either way; ``skipped`` shows on a short line only when the step was skipped (after
    the warning that names its causes); evaluation results (``eval/...``) always show."""
    if step_line == "full":
        return {k: v for k, v in metrics.items() if not k.startswith(("reward/", "rewards/"))}
    fields = {k: metrics[k] for k in SHORT_KEYS if k in metrics}
    if metrics.get("skipped"):
        fields["skipped"] = metrics["skipped"]
    fields.update({k: v for k, v in metrics.items() if k.startswith("eval/") and k != "eval/batches"})  # a count of batches
    return fields
