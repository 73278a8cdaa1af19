"""DAPO's reward-side tricks (Yu et al. 2025, "DAPO: An Open-Source LLM RL System at Scale").

* Dynamic sampling: a group whose rewards are all equal has zero group-relative advantage and
  contributes no gradient, only noise in the loss normaliser; DAPO drops such groups. The paper
  also over-samples until the batch is full again; here we only compute the mask and leave
  re-sampling to the caller (the trainer logs how many samples it kept).
* Overlong reward shaping ("soft overlong punishment"): completions that approach the generation
  limit get a length penalty that ramps linearly over the last ``buffer`` tokens, instead of the
  noisy all-or-nothing signal of truncation.
"""

from __future__ import annotations

import numpy as np

from polyrl.algorithms.advantages import as_groups


def dynamic_sampling_mask(rewards: np.ndarray | list[float], group_size: int) -> np.ndarray:
    """Per-group bool mask: True where the group's valid (non-NaN) rewards are not all equal.

    A group with fewer than two valid rewards carries no relative signal and is dropped too.
    """
    g = as_groups(rewards, group_size)
    valid = ~np.isnan(g)
    hi = np.where(valid, g, -np.inf).max(axis=1)
    lo = np.where(valid, g, np.inf).min(axis=1)
    return (valid.sum(axis=1) >= 2) & (hi > lo)


def expand_group_mask(group_mask: np.ndarray, group_size: int) -> np.ndarray:
    """Repeat a per-group mask to one entry per sample (grouped order)."""
    return np.repeat(np.asarray(group_mask, dtype=bool), group_size)


def overlong_penalty(
    lengths: np.ndarray | list[int], max_length: int, buffer: int, penalty_factor: float = 1.0
) -> np.ndarray:
    """DAPO's soft overlong penalty per completion (values in ``[-penalty_factor, 0]``).

    ``0`` while ``len <= max_length - buffer``; ``-penalty_factor * (len - (max_length - buffer))
    / buffer`` in between (linear, reaching ``-penalty_factor`` at ``max_length``);
    ``-penalty_factor`` beyond. Same as verl's ``overlong_buffer`` implementation of the paper.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    if not 1 <= buffer <= max_length:
        raise ValueError(f"buffer must be in [1, max_length={max_length}], got {buffer}")
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")
    n = np.asarray(lengths, dtype=np.float64).reshape(-1)
    exceed = n - (max_length - buffer)
    return -penalty_factor * np.clip(exceed / buffer, 0.0, 1.0)


def shape_overlong(
    rewards: np.ndarray | list[float],
    lengths: np.ndarray | list[int],
    max_length: int,
    buffer: int,
    penalty_factor: float = 1.0,
) -> np.ndarray:
    """``rewards + overlong_penalty(...)``; a NaN reward (no reward) stays NaN."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    pen = overlong_penalty(lengths, max_length, buffer, penalty_factor)
    if len(pen) != len(r):
        raise ValueError(f"{len(r)} rewards but {len(pen)} lengths")
    return r + pen


def kl_estimate(logprobs: np.ndarray, ref_logprobs: np.ndarray, estimator: str) -> np.ndarray:
    """Per-token KL(policy || reference) estimate from the sampled tokens' log-probs: k1
    ``l - r`` (verl's ``kl_penalty="kl"``), k2 ``(l - r)^2 / 2`` (``"mse"``), k3
    ``exp(r - l) - (r - l) - 1`` (``"low_var_kl"``)."""
    delta = np.asarray(ref_logprobs, np.float64) - np.asarray(logprobs, np.float64)
    if estimator == "k1":
        return -delta
    if estimator == "k2":
        return 0.5 * delta**2
    if estimator == "k3":
        return np.expm1(delta) - delta
    raise ValueError(f"unknown KL estimator {estimator!r}")


def kl_penalized_rewards(
    rewards: np.ndarray | list[float],
    logprobs: list[np.ndarray],
    ref_logprobs: list[np.ndarray],
    beta: float,
    estimator: str = "k1",
    masks: list[np.ndarray | None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """KL in the reward (verl's ``use_kl_in_reward`` with a fixed ``kl_ctrl``): each sequence's
    reward minus ``beta`` times its summed per-token KL estimate, and those sums.

    An outcome reward sits on the last token, so subtracting the token penalties and summing
    the returns is subtracting the sequence sum. ``masks`` (multi-turn episodes) keep inserted
    tokens out of the sum: the policy did not choose them. A NaN reward stays NaN."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if not len(r) == len(logprobs) == len(ref_logprobs):
        raise ValueError(f"{len(r)} rewards but {len(logprobs)} log-prob and {len(ref_logprobs)} reference rows")
    sums = np.zeros(len(r))
    for i, (lp, ref) in enumerate(zip(logprobs, ref_logprobs)):
        kl = kl_estimate(lp, ref, estimator)
        mask = None if masks is None else masks[i]
        sums[i] = float(kl.sum() if mask is None else kl[np.asarray(mask, dtype=bool)].sum())
    return r - beta * sums, sums
