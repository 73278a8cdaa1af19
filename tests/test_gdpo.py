"""GDPO: ``algorithm.multi_objective_aggregation = "normalize_then_sum"`` (TRL's option of the same
name): each reward normalized in its group, the weighted sum normalized over the batch. Checked
against TRL 1.16's arithmetic (``GRPOTrainer._generate_and_score_completions``), written out here
in torch, and through a real run whose train steps receive those advantages."""

from __future__ import annotations

import json

import attrs
import numpy as np
import pytest

from polyrl.algorithms.advantages import compute_advantages, decoupled_advantages
from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.errors import ConfigError


def trl_gdpo(per_reward: np.ndarray, weights: list[float], group_size: int) -> np.ndarray:
    """TRL's normalize_then_sum branch on the same scores (NaN: a reward that returned None)."""
    torch = pytest.importorskip("torch")

    def nanstd(x, dim=None, keepdim=False):  # TRL's: unbiased over the non-NaN values
        mean = torch.nanmean(x, dim=dim, keepdim=True) if dim is not None else torch.nanmean(x)
        variance = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True) if dim is not None \
            else torch.nanmean((x - mean) ** 2)
        count = torch.sum(~torch.isnan(x), dim=dim, keepdim=True) if dim is not None else torch.sum(~torch.isnan(x))
        variance = variance * count / (count - 1)
        return torch.sqrt(variance if keepdim or dim is None else variance.squeeze(dim))

    scores = torch.tensor(per_reward, dtype=torch.float64)
    k = scores.shape[1]
    unscorable = torch.isnan(scores).all(dim=1)
    grouped = scores.view(-1, group_size, k)
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, k)
    rewards = (reward_k * torch.tensor(weights, dtype=torch.float64)).nansum(dim=1)
    rewards[unscorable] = torch.nan
    advantages = (rewards - torch.nanmean(rewards)) / (nanstd(rewards) + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0).numpy()


def test_gdpo_advantages_are_trls_on_the_same_scores():
    rng = np.random.default_rng(3)
    scores = np.stack([rng.integers(0, 2, 32).astype(float),  # a 0/1 correctness reward
                       rng.normal(0, 50, 32),  # a wide-spread length-like reward
                       rng.uniform(0, 1, 32)], axis=1)
    scores[3, 1] = np.nan  # one reward did not score one sample
    scores[9] = np.nan  # no reward scored this one
    weights = [1.0, 0.5, 2.0]
    ours = decoupled_advantages(scores, weights, group_size=8)
    np.testing.assert_allclose(ours, trl_gdpo(scores, weights, 8), rtol=1e-9, atol=1e-12)
    assert ours[9] == 0.0
    # not the summed reward's advantage: the wide reward no longer drowns the 0/1 one
    summed = np.nansum(scores * np.array(weights), axis=1)
    summed[9] = np.nan
    assert not np.allclose(ours, compute_advantages(summed, 8))


def test_gdpo_of_one_reward_is_its_group_advantage_scaled_over_the_batch():
    rewards = np.array([0.0, 1.0, 1.0, 3.0, 2.0, 2.0, 2.0, 5.0])
    ours = decoupled_advantages(rewards[:, None], [1.0], group_size=4)
    group = compute_advantages(rewards, 4)
    np.testing.assert_allclose(ours, compute_advantages(group, 4, "reinforce", "batch"), rtol=1e-12)


@pytest.mark.parametrize(("overrides", "field", "words"), [
    ({"scale_rewards": "none"}, "algorithm.scale_rewards", "normalize_then_sum' scales each reward"),
    ({"advantage": "rloo"}, "algorithm.advantage", "has no per-reward form"),
    ({"overlong_buffer": 0.2}, "algorithm.overlong_buffer", "summed reward"),
    ({"beta": 0.01, "kl_in_reward": True}, "algorithm.kl_in_reward", "summed reward"),
    ({"multi_objective_aggregation": "sum"}, "algorithm.multi_objective_aggregation", "sum_then_normalize"),
])
def test_settings_gdpo_cannot_honour_are_one_error_naming_them(overrides, field, words):
    with pytest.raises(ConfigError) as info:
        AlgorithmConfig.preset("grpo", **{"multi_objective_aggregation": "normalize_then_sum", **overrides})
    assert info.value.field == field and words in str(info.value)


def test_trls_normalize_then_sum_is_taken_and_its_unread_scale_rewards_dropped():
    trl = pytest.importorskip("trl")
    from polyrl import api

    ours = api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True, multi_objective_aggregation="normalize_then_sum",
                                                  scale_rewards="batch", max_steps=1))
    assert ours.settings["algorithm.multi_objective_aggregation"] == "normalize_then_sum"
    assert ours.scale_rewards is None and "algorithm.scale_rewards" not in ours.settings


REWARDS = """
import json, os

LOG = os.path.join(os.path.dirname(__file__), "scores.jsonl")

def _log(name, scores):
    with open(LOG, "a") as f:
        f.write(json.dumps([name, scores]) + "\\n")
    return scores

def _text(c):
    return c[0]["content"] if isinstance(c, list) else c

def digits(prompts, completions, **kw):
    return _log("digits", [float(sum(ch.isdigit() for ch in _text(c))) for c in completions])

def length(prompts, completions, **kw):
    return _log("length", [float(len(_text(c))) * 10.0 for c in completions])
"""


def _captured_run(tmp_path, rewards_source: str, rewards: list[tuple[str, float]], **algorithm):
    """A toy run of 2 steps with ``rewards`` (function name, weight) from ``rewards_source``:
    the advantages each train step received, and the run's summary."""
    from polyrl.hookspecs import hookimpl
    from polyrl.trainer import Trainer
    from polyrl_toy import ToyPlugin

    from test_faults import toy_config

    (tmp_path / "rewards.py").write_text(rewards_source)
    seen: list[np.ndarray] = []

    class Capturing(ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            seen.append(np.asarray(batch.advantages, dtype=np.float64))
            return super().train_step(engine, batch, objective)

    config = toy_config(tmp_path, backend="capturing", steps=2, rewards=[
        {"function": f"{tmp_path / 'rewards.py'}:{name}", "weight": weight} for name, weight in rewards])
    config = attrs.evolve(config, algorithm=AlgorithmConfig.preset(
        "grpo", multi_objective_aggregation="normalize_then_sum", **algorithm))
    return seen, Trainer(config, extra_plugins=(Capturing("capturing"),)).run(progress=False)


def test_a_run_trains_on_gdpos_advantages(toy, tmp_path):
    """Two rewards, one with a wide spread: every train step gets GDPO's advantages of that
    step's own per-reward scores and weights, not the summed reward's."""
    seen, _ = _captured_run(tmp_path, REWARDS, [("digits", 1.0), ("length", 0.5)])
    logged = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert [name for name, _ in logged] == ["digits", "length"] * 2 and len(seen) == 2
    for step in range(2):
        scores = np.array([logged[2 * step][1], logged[2 * step + 1][1]]).T
        expected = decoupled_advantages(scores, [1.0, 0.5], group_size=4)
        np.testing.assert_allclose(seen[step], expected, rtol=1e-6, atol=1e-6)  # float32 in the batch
        summed = scores @ np.array([1.0, 0.5])
        assert not np.allclose(seen[step], compute_advantages(summed, 4), atol=1e-3)


def test_dapo_preset_under_gdpo_names_a_config_that_works():
    """The preset, not the user, set overlong_buffer: the error's fix must be one the user can apply."""
    with pytest.raises(ConfigError) as info:
        AlgorithmConfig.preset("dapo", multi_objective_aggregation="normalize_then_sum")
    assert info.value.field == "algorithm.overlong_buffer" and "dapo preset turns on" in str(info.value)
    fix = str(info.value)
    assert "name = 'grpo'" in fix and "epsilon_high = 0.28" in fix and "dynamic_sampling = true" in fix
    same = AlgorithmConfig.preset("grpo", multi_objective_aggregation="normalize_then_sum", epsilon=0.2,
                                  epsilon_high=0.28, loss_aggregation="token_mean", dynamic_sampling=True)
    assert same.overlong_buffer is None and same.clip_eps_high == 0.28


def test_dapo_preset_under_gdpo_in_a_toml_config_is_the_same_error():
    from polyrl.config import RunConfig

    data = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"},
            "rewards": [{"name": "numeric_match"}, {"name": "format"}],
            "algorithm": {"name": "dapo", "multi_objective_aggregation": "normalize_then_sum"}}
    with pytest.raises(ConfigError) as info:
        RunConfig.from_dict(data)
    assert info.value.field == "algorithm.overlong_buffer" and "name = 'grpo'" in str(info.value)


def test_dynamic_sampling_under_gdpo_keeps_a_group_whose_rewards_trade_off():
    """A group whose weighted sum is constant while its rewards vary (correct but long vs wrong but
    short) has GDPO advantages that are not zero: dynamic sampling keeps it. A group where every
    weighted reward is constant (or varies only in a reward of weight 0) is dropped."""
    algo = AlgorithmConfig.preset("grpo", multi_objective_aggregation="normalize_then_sum", dynamic_sampling=True)
    scores = np.array([[1, 0, 5], [0, 2, 9],  # group 0: correctness + length/2 constant at 1; varies
                       [1, 4, 0], [1, 4, 7],  # group 1: both weighted rewards constant; the weight-0 one varies
                       [0, 1, 0], [np.nan, 1, 0]], dtype=float)  # group 2: one valid correctness score only
    weights = [1.0, 0.5, 0.0]
    summed = scores @ np.array(weights)
    assert summed[0] == summed[1]  # what keep_mask judged: "all equal", dropped
    kept = algo.decoupled_keep_mask(scores, weights, group_size=2)
    assert kept.tolist() == [True, True, False, False, False, False]
    assert np.abs(decoupled_advantages(scores[:2, :2], weights[:2], 2)).max() > 0.5  # group 0 trains
    off = AlgorithmConfig.preset("grpo", multi_objective_aggregation="normalize_then_sum")
    assert off.decoupled_keep_mask(scores, weights, 2).all()


def test_a_gdpo_run_with_dynamic_sampling_trains_the_trade_off_groups(toy, tmp_path):
    """Through the trainer: with two rewards whose weighted sum is the same for every completion,
    the summed-reward filter dropped every group (nothing trained); GDPO's filter keeps them."""
    seen, summary = _captured_run(
        tmp_path,
        "def _text(c):\n    return c[0]['content'] if isinstance(c, list) else c\n\n"
        "def short(prompts, completions, **kw):\n    return [-float(len(_text(c))) for c in completions]\n\n"
        "def long(prompts, completions, **kw):\n    return [float(len(_text(c))) for c in completions]\n",
        [("short", 1.0), ("long", 1.0)], dynamic_sampling=True)
    kept = [m["samples_kept"] for m in summary["history"]]
    assert sum(kept) > 0 and seen, f"samples kept per step: {kept}"
