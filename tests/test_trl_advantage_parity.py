"""Advantages from reward functions that return None, and from groups left with one scored sample,
against TRL 1.16's own arithmetic on the same scores.

TRL (``GRPOTrainer._generate_and_score_completions``, sum_then_normalize) turns each None into NaN,
sums the functions with weights by ``nansum``, marks a sample no function scored NaN (its
``unscorable_mask``), takes the group baseline with ``torch.nanmean`` and the spread with
``trl.trainer.utils.nanstd`` (Bessel's correction over the non-NaN values: NaN under two), then
``torch.nan_to_num(advantages, nan=0.0)``: an unscorable sample, and every sample of a group (or a
batch, under ``scale_rewards="batch"``) with a single scored one, gets advantage 0. polyrl reads the
scores through ``RewardComputer`` and the advantages through ``AlgorithmConfig.loss_selection``, the
rule the training step uses; the TRL side below is its lines, in its float32, with its own
``nanstd``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import function_reward_plugin
from polyrl.types import Completion, RewardContext

torch = pytest.importorskip("torch")
trl_utils = pytest.importorskip("trl.trainer.utils")


def trl_advantages(per_func: list[list[float | None]], weights: list[float], num_generations: int,
                   scale_rewards: str) -> np.ndarray:
    """TRL 1.16's sum_then_normalize branch, line for line (``grpo_trainer.py``), on the functions'
    raw returns (None included): ``rewards_per_func[:, i] = torch.tensor(output, dtype=float32)``."""
    nanstd = trl_utils.nanstd
    columns = [[r if r is not None else torch.nan for r in out] for out in per_func]
    rewards_per_func = torch.tensor(columns, dtype=torch.float32).T.contiguous()
    reward_weights = torch.tensor(weights, dtype=torch.float32)
    unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(dim=1)
    rewards[unscorable_mask] = torch.nan
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        if num_generations > 1:
            std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
            std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
        else:
            std_rewards = torch.zeros_like(rewards)
    elif scale_rewards == "batch":
        std_rewards = nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    else:
        raise ValueError(scale_rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0).double().numpy()


def polyrl_advantages(per_func: list[list[float | None]], weights: list[float], group_size: int,
                      scale_rewards: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(advantages, rows the loss trains, the reward totals) as a polyrl training step gets them
    from the same functions' returns."""
    plugins = [function_reward_plugin(lambda completions, _out=out, **kw: list(_out), name=f"f{i}")
               for i, out in enumerate(per_func)]
    computer = RewardComputer(get_plugin_manager(extra=plugins, entry_points=False),
                              [(f"f{i}", w, {}) for i, w in enumerate(weights)])
    n = len(per_func[0])
    completions = [Completion(i // group_size, [1], [2, 3], [0.0, 0.0], text="x") for i in range(n)]
    result = computer(["q"] * n, completions, RewardContext(rows=[{}] * n, wanted=tuple(f"f{i}" for i in range(len(weights)))))
    algo = AlgorithmConfig.preset("grpo", scale_rewards=scale_rewards)
    keep, advantages, _ = algo.loss_selection(result.total, result.total, np.ones(n, dtype=bool), group_size, None,
                                              weights)
    return advantages, keep, result.total


CASES = {
    # group 0: every reward; 1: one sample no function scored; 2: a single scored sample left; 3: none scored
    "mixed": ([[1.0, 0.0, 0.5, 1.0, None, 2.0, 0.0, 1.0, None, None, 3.0, None, None, None, None, None],
               [0.5, None, 0.5, 0.0, None, 1.0, None, 0.0, None, None, None, None, None, None, None, None]],
              [1.0, 0.5], 4),
    "ties and spread": ([[1.0, 1.0, 0.2, 0.9, -3.0, 7.5], [None, 0.1, None, None, 2.0, None]], [1.0, 2.0], 2),
    "only one sample scored in the batch": ([[None, 0.7, None, None]], [1.0], 2),
    "nothing scored": ([[None, None, None, None], [None, None, None, None]], [1.0, 1.0], 2),
}


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("case", list(CASES))
def test_advantages_match_trls_formula_with_none_scores_and_single_sample_groups(case, scale_rewards):
    per_func, weights, group_size = CASES[case]
    ours, keep, totals = polyrl_advantages(per_func, weights, group_size, scale_rewards)
    theirs = trl_advantages(per_func, weights, group_size, scale_rewards)
    np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-5)  # TRL sums in float32, polyrl in float64
    unscorable = np.array([all(out[i] is None for out in per_func) for i in range(len(per_func[0]))])
    assert np.isnan(totals[unscorable]).all() and not np.isnan(totals[~unscorable]).any()
    assert (ours[unscorable] == 0.0).all()
    # TRL trains an unscorable row at advantage 0 (nothing but KL or entropy terms move it; neither is on
    # here): polyrl leaves it out of the loss, its divisor still counting it (test_loss_normaliser)
    assert not keep[unscorable].any() and keep[~unscorable].all()


def test_a_group_with_one_scored_sample_gets_advantage_zero_in_every_mode_as_in_trl():
    """TRL's ``nanstd`` of a single value is NaN (Bessel's correction over one), so that group's
    advantages are NaN, then 0 (``nan_to_num``); polyrl takes the std of one as 0, whose centred
    reward is already 0: 0 too, not ``0 / 1e-4`` noise nor the group's other members' NaN."""
    per_func = [[None, 5.0, None, None, 1.0, 2.0]]  # groups of 3: [-, 5, -], [-, 1, 2]
    for mode in ("group", "batch", "none"):
        ours, _, _ = polyrl_advantages(per_func, [1.0], 3, mode)
        assert ours[:3].tolist() == [0.0, 0.0, 0.0], mode
        np.testing.assert_allclose(ours, trl_advantages(per_func, [1.0], 3, mode), rtol=2e-6, atol=1e-5)
    trl_std = trl_utils.nanstd(torch.tensor([[math.nan, 5.0, math.nan]]), dim=1)
    assert torch.isnan(trl_std).all()  # what the oracle above relies on


def test_trls_config_refuses_one_generation_before_polyrl_reads_it():
    """``num_generations=1``: TRL's own GRPOConfig raises (its advantages would all be 0), so no
    script reaches polyrl.trl with it; polyrl's own run refuses group_size 1 under a group-relative
    estimator, naming the field (``AlgorithmConfig.needs_groups``)."""
    trl = pytest.importorskip("trl")
    with pytest.raises(ValueError, match="at least 2 generations"):
        trl.GRPOConfig(output_dir="unused", num_generations=1, per_device_train_batch_size=2, use_cpu=True,
                       report_to="none")
    why = AlgorithmConfig.preset("grpo").needs_groups()
    assert why is not None and "a single sample always gets 0" in why[0]
