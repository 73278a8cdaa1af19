"""Hostile corners of the algorithms: degenerate groups, absurd rewards, every completion masked
out, and algorithm keys that would do nothing. Real trainer runs on the tiny Llama (torch) where
the trainer decides, direct calls against the numpy formulas where the estimator does."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from polyrl.config import RunConfig
from polyrl.registry import get_registry
from polyrl.trainer import Trainer
from small_runs import cli_error_line, small_run_settings

REWARD = """
def varied(prompts, completions, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [float(len(set(t))) for t in texts]
"""


def _settings(tiny_model_dir: str, tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A 2-step run's config table (2 prompts x 2 samples, 2 new tokens); ``sections`` update it."""
    return small_run_settings(tiny_model_dir, tmp_path, REWARD, "varied", steps=2, prompts_per_step=2, **sections)


def _config(tiny_model_dir: str, tmp_path: Path, **sections: Any) -> RunConfig:
    return RunConfig.from_dict(_settings(tiny_model_dir, tmp_path, **sections))


# --- every completion masked out --------------------------------------------------------------


def test_all_truncated_under_mask_truncated_is_an_empty_step_not_a_non_finite_one(tiny_model_dir, tmp_path):
    """The random tiny model does not stop within 2 tokens: every completion is cut and masked.
    Nothing trains, so nothing is kept; that is a skipped empty step (as an all-equal DAPO batch),
    not a non-finite loss (which stopped the run with "non-finite loss or gradient" and logged the
    masked samples as kept). Such steps have a count of their own towards max_consecutive_skips
    (3 here, more than the run's 2 steps; tests/test_faults.py has the stop)."""
    if not get_registry().status("torch").available:
        pytest.skip("torch backend not usable here")
    config = _config(tiny_model_dir, tmp_path, algorithm={"mask_truncated_completions": True},
                     train={"max_consecutive_skips": 3})
    history = Trainer(config).run(progress=False)["history"]  # old code: TooManySkippedSteps
    assert len(history) == 2
    for m in history:
        assert m["completions/clipped_ratio"] == 1.0  # the premise: every completion was cut
        assert m["samples_kept"] == 0 and m["skipped"]
        assert (m["loss"], m["grad_norm"]) == (0.0, 0.0)  # TRL's: a loss over no token, its gradient 0


# --- rewards of any magnitude -----------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["group", "rloo", "reinforce"])
@pytest.mark.parametrize("scale_rewards", ["group", "batch"])
@pytest.mark.parametrize("magnitude", [1e160, 1e300, 1.7e308])
def test_std_scaled_advantages_of_huge_rewards_equal_those_of_the_same_rewards_scaled_down(
        estimator, scale_rewards, magnitude):
    """Squares of rewards past ~1e154 overflowed: the std became inf (every advantage 0, a silent
    no-op step) or NaN. Std-scaled advantages are scale-free, so huge rewards must give what the
    same rewards divided by a power of two give (eps divided alike)."""
    from polyrl.algorithms.advantages import compute_advantages

    pattern = np.array([1.0, -1.0, 0.5, 0.0, 0.25, 0.25, 1.0, -0.75])
    shift = 2.0 ** -int(np.frexp(magnitude)[1])  # brings the rewards near 1; exact
    huge = compute_advantages(pattern * magnitude, 4, estimator, scale_rewards)
    small = compute_advantages(pattern * magnitude * shift, 4, estimator, scale_rewards, eps=1e-4 * shift)
    assert np.isfinite(huge).all() and np.abs(huge).max() > 0.5
    np.testing.assert_allclose(huge, small, rtol=1e-12, atol=1e-12)


def test_a_weighted_reward_total_past_float64_is_one_reward_error(tiny_model_dir, tmp_path):
    """Each score is finite (the reward guard passes it), but 2 x 1e308 is inf: the step is not
    taken and the error names the fix (it was a ValueError traceback from the advantages)."""
    if not get_registry().status("torch").available:
        pytest.skip("torch backend not usable here")
    from polyrl.errors import RewardError

    (tmp_path / "huge.py").write_text("def huge(prompts, completions, **kw):\n"
                                      "    return [1e308 * (i % 2) for i in range(len(completions))]\n")
    config = _config(tiny_model_dir, tmp_path, rewards=[{"function": f"{tmp_path / 'huge.py'}:huge", "weight": 2.0}])
    with pytest.raises(RewardError, match="overflows float64.*Fix: scale the reward"), warnings.catch_warnings():
        warnings.filterwarnings("error", message="overflow encountered", category=RuntimeWarning)  # one error, no numpy noise
        Trainer(config).run(progress=False)
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text()  # the step was not taken


# --- algorithm keys that would do nothing -------------------------------------------------------


INERT = [
    ("sapo", {"epsilon": 0.1}, "algorithm.epsilon", "policy_loss 'sapo'"),
    ("vespo", {"epsilon_high": 0.3}, "algorithm.epsilon_high", "no clip"),
    ("cispo", {"epsilon": 0.1}, "algorithm.epsilon", "1 + epsilon_high"),
    ("cispo", {"dual_clip": 3.0}, "algorithm.dual_clip", "PPO surrogate"),
    ("grpo", {"sapo_temperature_neg": 2.0}, "algorithm.sapo_temperature_neg", 'policy_loss = "sapo"'),
    ("sapo", {"vespo_lambda_pos": 1.0}, "algorithm.vespo_lambda_pos", 'policy_loss = "vespo"'),
    ("grpo", {"kl_estimator": "k1"}, "algorithm.kl_estimator", "beta > 0"),
    ("grpo", {"beta": 0.01, "kl_in_reward": True, "kl_target": 0.2}, "algorithm.kl_target", 'kl_ctrl = "adaptive"'),
    ("grpo", {"beta": 0.04, "ref_sync_alpha": 0.5}, "algorithm.ref_sync_alpha", "ref_sync_every > 0"),
    ("grpo", {"overlong_penalty": 0.5}, "algorithm.overlong_penalty", "overlong_buffer"),
    ("dapo", {"mismatch_cap": 3.0}, "algorithm.mismatch_cap", '"tis" or "mis"'),
    ("grpo", {"mismatch_level": "sequence"}, "algorithm.mismatch_level", '"tis" or "mis"'),
    # TRL's generation limit written under [algorithm]: polyrl's key there only feeds Dr.GRPO / overlong shaping
    ("grpo", {"max_completion_length": 256}, "algorithm.max_completion_length", "generation.max_new_tokens"),
]


@pytest.mark.parametrize(("name", "keys", "field", "fix"), INERT)
def test_a_key_that_does_nothing_in_its_configuration_is_refused(name, keys, field, fix, tmp_path):
    """Each was accepted and silently ignored: a run read as tuned that was not."""
    from polyrl.algorithms.presets import AlgorithmConfig
    from polyrl.errors import ConfigError

    data = {"model": {"path": str(tmp_path)}, "data": {"task": "arithmetic"},
            "rewards": [{"name": "numeric_match"}], "algorithm": {"name": name, **keys}}
    for make in (lambda: RunConfig.from_dict(data), lambda: AlgorithmConfig.preset(name, **keys)):
        with pytest.raises(ConfigError) as caught:
            make()
        assert caught.value.field == field and "does nothing" in str(caught.value)
        assert fix in str(caught.value)


@pytest.mark.parametrize(("name", "keys"), [
    ("sapo", {}), ("vespo", {}), ("cispo", {}), ("luspo", {}), ("dapo", {"overlong_penalty": 0.5}),
    ("grpo", {"policy_loss": "cispo", "epsilon": 0.5}),  # cispo's cap is 1 + epsilon while epsilon_high is unset
    ("cispo", {"epsilon_high": 3.0}), ("grpo", {"dual_clip": 3.0, "epsilon": 0.1}),
    ("grpo", {"beta": 0.04, "kl_estimator": "k1", "ref_sync_every": 8, "ref_sync_alpha": 0.5}),
    ("grpo", {"beta": 0.01, "kl_in_reward": True, "kl_ctrl": "adaptive", "kl_target": 0.2, "kl_horizon": 50}),
    ("sapo", {"sapo_temperature_pos": 2.0}), ("vespo", {"vespo_k_neg": 1.0}),
    ("grpo", {"mismatch_correction": "mis", "mismatch_level": "sequence", "mismatch_cap": 3.0}),
    ("dr_grpo", {"max_completion_length": 256}), ("dapo", {"max_completion_length": 256}),
    ("grpo", {"overlong_buffer": 0.2, "max_completion_length": 256}),
])
def test_keys_that_act_and_the_presets_own_values_are_accepted(name, keys, tmp_path):
    data = {"model": {"path": str(tmp_path)}, "data": {"task": "arithmetic"},
            "rewards": [{"name": "numeric_match"}], "algorithm": {"name": name, **keys}}
    assert RunConfig.from_dict(data).algorithm.name == name


def test_an_inert_key_is_one_error_line_from_the_cli(tiny_model_dir, tmp_path):
    error = cli_error_line(tiny_model_dir, tmp_path, '[algorithm]\nname = "sapo"\nepsilon = 0.1\n')
    assert error.startswith("error: algorithm.epsilon: is set but does nothing")


def test_mask_truncated_with_ignore_eos_is_refused(tmp_path):
    """ignore_eos samples every completion to max_new_tokens: all are truncated, all masked out,
    and every step was an empty one."""
    from polyrl.errors import ConfigError

    base = {"model": {"path": str(tmp_path)}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}],
            "algorithm": {"mask_truncated_completions": True}}
    with pytest.raises(ConfigError, match="nothing would ever train") as caught:
        RunConfig.from_dict({**base, "generation": {"ignore_eos": True}})
    assert caught.value.field == "algorithm.mask_truncated_completions"
    # a stop string still ends completions early: accepted
    RunConfig.from_dict({**base, "generation": {"ignore_eos": True, "stop": ["\n"]}})
