"""The per-step numbers users of TRL and verl look for, computed from what a step already has.

Names follow TRL's GRPOTrainer where it has one (``completions/mean_length``,
``completions/clipped_ratio``, ``frac_reward_zero_std``) so dashboards and habits carry over; the
throughput and memory keys follow verl's ``perf/`` prefix. Everything here is cheap arithmetic on
numpy arrays: no backend call, so every backend reports the same keys.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from polyrl.step_gather import Shard
from polyrl.types import Completion


def completion_metrics(shard: Shard) -> dict[str, float]:
    """Length statistics of the step's completions (every rank's: ``polyrl.step_gather``);
    ``clipped_ratio`` is the share cut off by ``max_new_tokens`` (finish reason ``length``) rather
    than ending on their own."""
    if not shard.size:
        return {}
    lengths = shard.completion_len.astype(np.float64)
    return {
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float(shard.clipped.mean()),
    }


def frac_reward_zero_std(rewards: np.ndarray, group_size: int) -> float:
    """Share of prompt groups whose rewards are all equal: they carry no group-relative signal.
    Non-finite rewards (a failed reward call) are ignored within a group."""
    groups = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    flat = 0
    for group in groups:
        finite = group[np.isfinite(group)]
        flat += int(finite.size == 0 or np.all(finite == finite[0]))
    return flat / max(len(groups), 1)


def throughput(tokens: Mapping[str, int], seconds: Mapping[str, float]) -> dict[str, float]:
    """``perf/{phase}_tokens_per_s`` for every phase that took measurable time."""
    return {f"perf/{phase}_tokens_per_s": float(tokens[phase] / seconds[phase])
            for phase in tokens if seconds.get(phase, 0.0) > 1e-9}


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (the OS's high-water mark), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak / 2**20 if sys.platform == "darwin" else peak / 1024)  # bytes on macOS, KiB on Linux


def sampled_tokens(completions: Sequence[Completion]) -> int:
    """Tokens the generator sampled: an episode's inserted tokens (tool results, the environment's
    words, template glue) were never generated, so its mask's True entries only."""
    return int(sum(len(c.completion_ids) if c.mask is None else int(np.count_nonzero(c.mask)) for c in completions))


#: TRL's names for the ratio clip fractions a backend reports (``clip_low_fraction``...)
TRL_CLIP_NAMES = {"clip_low_fraction": "clip_ratio/low_mean", "clip_high_fraction": "clip_ratio/high_mean",
                  "clip_fraction": "clip_ratio/region_mean"}


def clip_region_metrics(train_metrics: Mapping[str, Any]) -> dict[str, float]:
    """The update's clip fractions under TRL's names: below 1 - eps_low with a negative advantage,
    above 1 + eps_high with a positive one, and either (the clipped region)."""
    return {trl: float(train_metrics[ours]) for ours, trl in TRL_CLIP_NAMES.items() if ours in train_metrics}


def step_metrics(shard: Shard, rewards: np.ndarray, group_size: int,
                 seconds: Mapping[str, float], trained_tokens: int) -> dict[str, Any]:
    """All of the above for the whole step (``shard``: every rank's completions, joined).
    ``seconds`` has the phases' durations (``generate`` the rollout's own, ``reward`` the scoring,
    ``train`` the update; under a launcher each the slowest rank's, which the job waited for);
    ``trained_tokens`` counts the prompt and completion tokens of the sequences the update saw.
    Memory is the largest rank's peak."""
    tokens = {"generate": int(shard.sampled_len.sum()), "score": int(shard.completion_len.sum()),
              "train": trained_tokens}
    phases = {"generate": seconds.get("generate", 0.0), "score": seconds.get("reward", 0.0),
              "train": seconds.get("train", 0.0)}
    return {
        **completion_metrics(shard),
        "frac_reward_zero_std": frac_reward_zero_std(rewards, group_size),
        **throughput(tokens, phases),
        "perf/peak_rss_mb": round(shard.peak_rss_mb, 1),
    }
