"""REINFORCE without groups, and rewards whose unscaled advantages no train backend can hold.
Real trainer runs on the tiny Llama (torch): the config rule and the refusal are what a user meets."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from polyrl.config import RunConfig
from polyrl.errors import ConfigError, RewardError
from polyrl.registry import get_registry
from polyrl.trainer import Trainer
from small_runs import cli_error_line, small_run_settings

REWARDS = """
def varied(prompts, completions, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [float(len(set(t))) for t in texts]

def huge(prompts, completions, **kwargs):
    return [1e300 if i % 2 else -1e300 for i in range(len(completions))]

def past_float64(prompts, completions, **kwargs):
    return [1.7e308 if i % 2 else -1.7e308 for i in range(len(completions))]
"""


def _settings(model: str, tmp_path: Path, reward: str = "varied", **sections: Any) -> dict[str, Any]:
    return small_run_settings(model, tmp_path, REWARDS, reward, steps=1, prompts_per_step=4, **sections)


def _torch() -> None:
    if not get_registry().status("torch").available:
        pytest.skip("torch backend not usable here")


# --- generation.group_size = 1 ------------------------------------------------------------------


def test_reinforce_trains_with_one_sample_per_prompt(tiny_model_dir, tmp_path):
    """REINFORCE's baseline is the batch mean: one sample per prompt is a valid run (it was refused
    with "must be an integer in [2, 65536]")."""
    _torch()
    config = RunConfig.from_dict(_settings(tiny_model_dir, tmp_path, generation={"group_size": 1},
                                           algorithm={"name": "reinforce"}))
    history = Trainer(config).run(progress=False)["history"]
    assert len(history) == 1 and not history[0]["skipped"]
    assert history[0]["samples_kept"] == 4  # 4 prompts x 1 sample, all trained on
    assert history[0]["grad_norm"] > 0  # the advantages were not all 0
    assert (tmp_path / "run" / "checkpoints" / "step-00000001").is_dir()


@pytest.mark.parametrize(("algorithm", "fix"), [
    ({"name": "grpo"}, 'algorithm.name = "reinforce"'),
    ({"name": "rloo"}, 'algorithm.name = "reinforce"'),
    ({"name": "dr_grpo"}, 'algorithm.name = "reinforce"'),
    ({"name": "reinforce", "scale_rewards": "group"}, 'scale_rewards = "batch" or "none"'),
    ({"name": "reinforce", "dynamic_sampling": True}, "dynamic_sampling = false"),
])
def test_one_sample_per_prompt_is_refused_where_a_group_is_needed(algorithm, fix, tmp_path):
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(_settings(str(tmp_path), tmp_path, generation={"group_size": 1}, algorithm=algorithm))
    assert caught.value.field == "generation.group_size"
    assert "must be >= 2" in str(caught.value) and fix in str(caught.value)


def test_reinforce_with_one_sample_in_the_whole_batch_is_refused(tmp_path):
    """1 prompt x 1 sample: the batch mean is the only reward, every advantage 0, nothing trains."""
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(_settings(str(tmp_path), tmp_path, generation={"group_size": 1},
                                      algorithm={"name": "reinforce"}, train={"prompts_per_step": 1}))
    assert caught.value.field == "train.prompts_per_step"


def test_grpo_at_group_size_one_is_one_error_line_from_the_cli(tiny_model_dir, tmp_path):
    error = cli_error_line(tiny_model_dir, tmp_path, "[generation]\ngroup_size = 1\n")
    assert error.startswith("error: generation.group_size: must be >= 2 here, got 1")
    assert 'algorithm.name = "reinforce"' in error


# --- unscaled advantages past float32 ------------------------------------------------------------


@pytest.mark.parametrize("name", ["reinforce", "rloo"])
@pytest.mark.parametrize("reward", ["huge", "past_float64"])
def test_unscaled_advantages_past_float32_are_one_error_naming_the_reward(name, reward, tiny_model_dir, tmp_path):
    """±1e300 rewards gave ±1e300 (or, for RLOO's 3.4e308 spread, inf) advantages: inf in the float32
    batch, a NaN loss, skipped steps and a stop that blamed optimizer.lr. Now the step is refused at
    once with the reward named; the state before it is checkpointed and nothing is logged as trained."""
    _torch()
    config = RunConfig.from_dict(_settings(tiny_model_dir, tmp_path, reward, algorithm={"name": name},
                                           train={"steps": 3, "prompts_per_step": 2}))
    with pytest.raises(RewardError) as caught:
        Trainer(config).run(progress=False)
    message = str(caught.value)
    assert f"reward {reward!r}" in message and 'scale_rewards = "batch"' in message, message
    assert (tmp_path / "run" / "checkpoints" / "step-00000000").is_dir()
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text()


def test_the_same_rewards_train_with_batch_scaled_advantages(tiny_model_dir, tmp_path):
    """The fix the error names works: batch std scaling is scale-free (an exact power-of-two rescale)."""
    _torch()
    config = RunConfig.from_dict(_settings(tiny_model_dir, tmp_path, "past_float64",
                                           algorithm={"name": "rloo", "scale_rewards": "batch"},
                                           train={"prompts_per_step": 2}))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="overflow encountered", category=RuntimeWarning)
        history = Trainer(config).run(progress=False)["history"]
    assert not history[0]["skipped"] and 0 < history[0]["grad_norm"] < float("inf")
    # the sample std of these rewards is past float64's largest value: logged as inf, not a crash
    assert history[0]["reward_mean"] == 0.0 and history[0]["reward_std"] == float("inf")
    assert history[0]["reward/past_float64/std"] == float("inf")
