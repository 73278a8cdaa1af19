"""Advantage estimators: turn one scalar reward per completion into one advantage per completion.

Input layout (every function here): ``rewards`` is a float array of ``N = groups * group_size``
values ordered by group (all samples of prompt 0 first, as ``generate`` returns them).

Missing rewards
    A NaN reward means "this sample has no reward" (every reward function returned None for it).
    NaN samples are *excluded from every statistic* (group means, stds, the batch baseline) and
    get advantage ``0.0``, so they neither push the policy nor distort their group's baseline.
    The trainer additionally drops them from the batch. Infinite rewards are an error.

Standard deviation
    Sample (unbiased, ``ddof=1``) standard deviation, matching TRL's ``GRPOTrainer`` which uses
    ``torch.std`` (unbiased by default). With fewer than two valid samples the std is taken as 0,
    which is harmless: such a group's centred rewards are already 0.

Estimators
    * ``group`` (GRPO, Shao et al. 2024, "DeepSeekMath"): ``r_i - mean_g``;
    * ``rloo`` (Ahmadian et al. 2024, "Back to Basics", after Kool et al. 2019): leave-one-out
      baseline ``r_i - mean_{j != i} r_j`` (equal to ``G/(G-1) * (r_i - mean_g)``);
    * ``reinforce``: ``r_i - mean over the whole batch`` (REINFORCE with a batch-mean baseline).

Scaling (``scale_rewards``, TRL's option of the same name) then divides the centred value:
    * ``group``: by the group's reward std ``+ eps`` (GRPO);
    * ``batch``: by the std of all rewards in the batch ``+ eps`` (TRL ``scale_rewards="batch"``,
      after Liu et al. 2025 "Part I: Tricks or Traps?");
    * ``none``: not at all (Dr.GRPO, Liu et al. 2025 "Understanding R1-Zero-Like Training": the
      std division biases towards too-easy/too-hard prompts).
``eps`` defaults to ``1e-4`` as in TRL.

Several rewards (``multi_objective_aggregation``, TRL's option of the same name)
    * ``sum_then_normalize`` (the default): the rewards are summed with their weights, then the
      estimator and scaling above turn the sum into advantages;
    * ``normalize_then_sum`` (GDPO, Liu et al. 2026, "Group reward-Decoupled Normalization Policy
      Optimization"): each reward is normalized within its group on its own, ``(r_k - mean_g) /
      (std_g + eps)`` (a sample that reward did not score counts 0 in the sum), the normalized
      rewards are summed with their weights, and the sum is normalized over the whole batch,
      ``(s - mean) / (std + eps)`` (``decoupled_advantages``). Why: summed first, a reward with a
      wide spread drowns the others' within-group differences, and distinct reward combinations
      collapse to the same advantage.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from polyrl.safe_stats import power_of_two_scale

AdvantageEstimator = Literal["group", "rloo", "reinforce"]
ScaleRewards = Literal["group", "batch", "none"]

ADVANTAGE_ESTIMATORS: tuple[str, ...] = ("group", "rloo", "reinforce")
SCALE_REWARDS: tuple[str, ...] = ("group", "batch", "none")
MULTI_OBJECTIVE_AGGREGATIONS: tuple[str, ...] = ("sum_then_normalize", "normalize_then_sum")
DEFAULT_EPS = 1e-4


def as_groups(rewards: np.ndarray | list[float], group_size: int) -> np.ndarray:
    """Validate ``rewards`` and view them as ``(groups, group_size)`` float64 (NaN = no reward)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"rewards must be a 1-D array, got shape {r.shape}")
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if len(r) % group_size:
        raise ValueError(
            f"{len(r)} rewards do not split into groups of {group_size}: rewards must be ordered "
            "by group, group_size samples per prompt"
        )
    if np.isinf(r).any():
        raise ValueError("rewards must be finite (NaN marks a sample without reward), got inf")
    return r.reshape(-1, group_size)


def _nanstd(x: np.ndarray, axis: int | None) -> np.ndarray:
    """Sample std over non-NaN entries; 0 where fewer than two are valid."""
    valid = ~np.isnan(x)
    count = valid.sum(axis=axis, keepdims=True)
    mean = np.where(valid, x, 0.0).sum(axis=axis, keepdims=True) / np.maximum(count, 1)
    sq = np.where(valid, (x - mean) ** 2, 0.0).sum(axis=axis, keepdims=True)
    var = np.where(count > 1, sq / np.maximum(count - 1, 1), 0.0)
    return np.sqrt(var)


def _group_mean(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean over valid members, valid mask, valid count), keepdims over the group axis."""
    valid = ~np.isnan(g)
    count = valid.sum(axis=1, keepdims=True)
    total = np.where(valid, g, 0.0).sum(axis=1, keepdims=True)
    return total / np.maximum(count, 1), valid, count


def _centred(g: np.ndarray, estimator: str) -> np.ndarray:
    if estimator in ("group", "rloo"):
        # measured from the group's smallest member: a tie is then exactly 0 (a mean of equal floats
        # can round away from them, and a 1e-13 residue divided by a 1e-13 std is not 0)
        lowest = np.where(np.isnan(g), np.inf, g).min(axis=1, keepdims=True)
        g = g - np.where(np.isfinite(lowest), lowest, 0.0)
    if estimator == "group":
        mean, _, _ = _group_mean(g)
        return g - mean
    if estimator == "rloo":
        _, valid, count = _group_mean(g)
        total = np.where(valid, g, 0.0).sum(axis=1, keepdims=True)
        others = (total - np.where(valid, g, 0.0)) / np.maximum(count - 1, 1)
        # fewer than two valid members: no leave-one-out baseline exists -> advantage 0
        return np.where(count > 1, g - others, 0.0)
    if estimator == "reinforce":
        flat = g[~np.isnan(g)]
        baseline = flat.mean() if flat.size else 0.0
        return g - baseline
    raise ValueError(f"unknown advantage estimator {estimator!r}; use one of {ADVANTAGE_ESTIMATORS}")


def compute_advantages(
    rewards: np.ndarray | list[float],
    group_size: int,
    estimator: str = "group",
    scale_rewards: str = "group",
    eps: float = DEFAULT_EPS,
) -> np.ndarray:
    """Advantages (float64, length N) for grouped rewards; NaN rewards get advantage 0."""
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"unknown scale_rewards {scale_rewards!r}; use one of {SCALE_REWARDS}")
    g = as_groups(rewards, group_size)
    scale = power_of_two_scale(g)  # exact: (s c) / (s std + s eps) is bitwise c / (std + eps)
    if scale != 1.0:
        g = g * scale
    adv = _centred(g, estimator)
    if scale_rewards == "group":
        adv = adv / (_nanstd(g, axis=1) + eps * scale)
    elif scale_rewards == "batch":
        adv = adv / (float(_nanstd(g.reshape(-1), axis=None).reshape(())) + eps * scale)
    elif scale != 1.0:
        with np.errstate(over="ignore"):  # a spread past float64's range is inf, as unscaled
            adv = adv / scale
    return np.where(np.isnan(g), 0.0, adv).reshape(-1)


def group_advantages(
    rewards: np.ndarray | list[float], group_size: int, scale_rewards: str = "group", eps: float = DEFAULT_EPS
) -> np.ndarray:
    """GRPO: ``(r - mean_g) / (std_g + eps)``; ``scale_rewards="none"`` is Dr.GRPO's ``r - mean_g``."""
    return compute_advantages(rewards, group_size, "group", scale_rewards, eps)


def rloo_advantages(
    rewards: np.ndarray | list[float], group_size: int, scale_rewards: str = "none", eps: float = DEFAULT_EPS
) -> np.ndarray:
    """RLOO: ``r_i - mean of the other (valid) members of i's group``."""
    return compute_advantages(rewards, group_size, "rloo", scale_rewards, eps)


def reinforce_advantages(
    rewards: np.ndarray | list[float], group_size: int = 1, scale_rewards: str = "none", eps: float = DEFAULT_EPS
) -> np.ndarray:
    """REINFORCE with a batch-mean baseline: ``r_i - mean(r)`` over all valid samples."""
    return compute_advantages(rewards, group_size, "reinforce", scale_rewards, eps)


def decoupled_advantages(
    per_reward: np.ndarray, weights: np.ndarray | list[float], group_size: int, eps: float = DEFAULT_EPS
) -> np.ndarray:
    """GDPO's advantages (``multi_objective_aggregation = "normalize_then_sum"``): ``per_reward``
    is ``(N, K)``, each reward's scores (NaN where it did not score a sample), ordered by group as
    ``rewards`` above; ``weights`` one per reward. A sample no reward scored gets 0 and stays out
    of the batch statistics, as a NaN reward does everywhere here."""
    scores = np.asarray(per_reward, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[1] != len(w):
        raise ValueError(f"per_reward must be (samples, {len(w)} rewards), got shape {scores.shape}")
    summed = np.zeros(len(scores), dtype=np.float64)
    with np.errstate(over="ignore"):  # an absurd weight: inf, refused by as_groups below
        for k, weight in enumerate(w):
            summed += weight * group_advantages(scores[:, k], group_size, "group", eps)
    summed[np.isnan(scores).all(axis=1)] = np.nan
    return compute_advantages(summed, group_size, "reinforce", "batch", eps)
