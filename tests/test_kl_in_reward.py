"""KL in the reward (verl's ``use_kl_in_reward``): beta x each sequence's summed KL to the
reference comes off its reward before advantages, and the loss then has no KL term."""

from __future__ import annotations


import numpy as np
import pytest

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.algorithms.shaping import kl_estimate, kl_penalized_rewards
from polyrl.config import RunConfig
from polyrl.registry import get_registry
from polyrl.types import TokenSequence

from digits_run import digits_config


def test_penalty_is_beta_times_the_summed_token_kl():
    logp = [np.array([-1.0, -2.0]), np.array([-0.5, -0.1, -3.0])]
    ref = [np.array([-1.5, -1.0]), np.array([-0.5, -0.4, -2.0])]
    shaped, sums = kl_penalized_rewards([1.0, float("nan")], logp, ref, beta=0.1, estimator="k1")
    np.testing.assert_allclose(sums, [0.5 - 1.0, 0.0 + 0.3 - 1.0])
    assert shaped[0] == pytest.approx(1.0 - 0.1 * (-0.5))
    assert np.isnan(shaped[1])  # no reward stays no reward
    masked, msums = kl_penalized_rewards([0.0, 0.0], logp, ref, 1.0, "k1",
                                         [np.array([True, False]), None])  # inserted tokens: not the policy's
    np.testing.assert_allclose(msums, [0.5, -0.7])
    np.testing.assert_allclose(masked, [-0.5, 0.7])


def test_estimators():
    lp, r = np.array([-1.0, -2.0]), np.array([-1.5, -1.0])
    d = r - lp
    np.testing.assert_allclose(kl_estimate(lp, r, "k2"), 0.5 * d**2)
    np.testing.assert_allclose(kl_estimate(lp, r, "k3"), np.exp(d) - d - 1)


def test_kl_in_reward_takes_the_kl_out_of_the_loss():
    algo = AlgorithmConfig.preset("grpo", beta=0.2, kl_in_reward=True)
    assert algo.objective(8).beta == 0.0
    assert AlgorithmConfig.preset("grpo", beta=0.2).objective(8).beta == 0.2


def test_tiny_llama_run_shapes_each_reward_by_its_summed_k1_kl(tiny_model_dir, tmp_path, monkeypatch):
    """Two torch steps on the tiny Llama: at step 1 the policy has moved off the reference, and the
    rewards the advantages see are exactly reward - beta * sum_t (logp_t - ref_t), with logp the
    trainer's before its update and ref from a separate engine on the untouched model."""
    if not get_registry().status("torch").available:
        pytest.skip("torch backend not usable here")
    from polyrl.engine import Engine
    from polyrl.trainer import Trainer
    from polyrl.types import EngineConfig

    beta = 0.5
    config = digits_config(tiny_model_dir, tmp_path, {"name": "grpo", "beta": beta, "kl_in_reward": True,
                                                      "kl_estimator": "k1"},
                           steps=2, prompts=8, prompts_per_step=2, group_size=4, max_new_tokens=8, lr=5e-3)
    trainer = Trainer(config)
    seen: list[dict] = []
    score = trainer._score

    def recording_score(rows, completions):
        scored = score(rows, completions)
        seen.append({"completions": completions, "rewards": np.asarray(scored.total, np.float64)})
        return scored

    advantages = AlgorithmConfig.advantages

    def recording_advantages(self, rewards, group_size):
        seqs = [TokenSequence.of(c) for c in seen[-1]["completions"]]
        seen[-1]["shaped"] = np.array(rewards, dtype=np.float64)
        seen[-1]["policy"] = trainer.train_engine.logprobs(seqs, 1.0)  # weights before this step's update
        return advantages(self, rewards, group_size)

    monkeypatch.setattr(trainer, "_score", recording_score)
    monkeypatch.setattr(AlgorithmConfig, "advantages", recording_advantages)
    history = trainer.run(progress=False)["history"]

    reference = Engine(get_registry(), "torch", EngineConfig(model=trainer.model_path, role="reference", threads=1))
    for step in seen:
        seqs = [TokenSequence.of(c) for c in step["completions"]]
        ref = reference.logprobs(seqs, 1.0)
        kl = np.array([float(np.sum(p.astype(np.float64) - r)) for p, r in zip(step["policy"], ref)])
        np.testing.assert_allclose(step["shaped"], step["rewards"] - beta * kl, rtol=1e-4, atol=1e-4)
        step["kl"] = kl
    assert np.allclose(seen[0]["kl"], 0.0, atol=1e-4)  # step 0: the policy is the reference
    assert np.abs(seen[1]["kl"]).max() > 1e-2  # step 1: it has moved, and the reward feels it
    assert history[1]["kl_in_reward"] == pytest.approx(float(np.mean(seen[1]["kl"])), rel=1e-3, abs=1e-4)
    assert "kl" not in history[1]  # no KL term in the loss: the KL is kl_in_reward's, a loss kl of 0 would mislead


# --- the adaptive coefficient (verl's kl_ctrl.type = "adaptive") -----------------------------------


def test_adaptive_coefficient_moves_by_the_clipped_relative_error():
    from polyrl.algorithms.kl_control import adapted_kl_coef, batch_kl

    assert adapted_kl_coef(0.1, 0.2, 8, target=0.1, horizon=16) == pytest.approx(0.1 * (1 + 0.2 * 0.5))  # clipped
    assert adapted_kl_coef(0.1, 0.09, 8, target=0.1, horizon=16) == pytest.approx(0.1 * (1 - 0.1 * 0.5))
    assert adapted_kl_coef(0.1, 0.0, 8, target=0.1, horizon=16) == pytest.approx(0.1 * (1 - 0.2 * 0.5))
    assert batch_kl([0.4, 0.3], [4, 1]) == pytest.approx((0.1 + 0.3) / 2)  # token mean, then sequence mean


@pytest.mark.parametrize(("overrides", "field"), [
    ({"kl_ctrl": "adaptive", "beta": 0.1}, "algorithm.kl_ctrl"),  # steers the reward's KL only
    ({"kl_ctrl": "pid", "beta": 0.1, "kl_in_reward": True}, "algorithm.kl_ctrl"),
    ({"kl_target": 0.0, "beta": 0.1, "kl_in_reward": True}, "algorithm.kl_target"),
    ({"kl_horizon": 0, "beta": 0.1, "kl_in_reward": True}, "algorithm.kl_horizon"),
])
def test_bad_kl_controller_settings_name_the_field(overrides, field):
    from polyrl.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        AlgorithmConfig.preset("grpo", **overrides)
    assert err.value.field == field and err.value.fix


def test_adaptive_coefficient_is_logged_and_resumed(tiny_model_dir, tmp_path):
    """Step 0's KL is 0 (the policy is the reference), far under the target: the coefficient
    shrinks by the full 20% x samples / horizon. A checkpoint carries it, and a resumed run
    continues from it instead of restarting at beta."""
    if not get_registry().status("torch").available:
        pytest.skip("torch backend not usable here")
    from polyrl.trainer import Trainer

    def config(steps: int) -> RunConfig:
        return digits_config(tiny_model_dir, tmp_path, {"name": "grpo", "beta": 0.2, "kl_in_reward": True,
                                                        "kl_ctrl": "adaptive", "kl_target": 0.1, "kl_horizon": 16},
                             steps=steps, prompts=8, prompts_per_step=2, group_size=4, max_new_tokens=6, lr=5e-3,
                             checkpoint_every=2)

    first = Trainer(config(2))
    history = first.run(progress=False)["history"]
    assert history[0]["kl_coef"] == pytest.approx(0.2)
    assert history[1]["kl_coef"] == pytest.approx(0.2 * (1 - 0.2 * 8 / 16))
    assert first.kl_coef != pytest.approx(history[1]["kl_coef"])  # updated after step 1 too
    resumed = Trainer(config(3))
    assert resumed.kl_coef == 0.2
    assert resumed.resume()
    assert resumed.kl_coef == pytest.approx(first.kl_coef, rel=1e-12)


def test_a_checkpoint_from_before_these_fields_resumes():
    """A snapshot without the new algorithm fields (written by an older version) is the same
    experiment while they stay at their defaults, and a different one once they are switched on."""
    from polyrl import resume_config
    from polyrl.errors import ConfigError

    base = {"model": {"path": "tiny"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}],
            "algorithm": {"name": "grpo", "beta": 0.1}}
    new_fields = ("algorithm.kl_in_reward", "algorithm.kl_ctrl", "algorithm.kl_target", "algorithm.kl_horizon",
                  "algorithm.sapo_temperature_pos", "algorithm.vespo_k_neg")
    old = {k: v for k, v in resume_config.snapshot(RunConfig.from_dict(base)).items() if k not in new_fields}
    assert resume_config.check(old, RunConfig.from_dict(base), weights_only=False) == []
    switched = {**base, "algorithm": {"name": "grpo", "beta": 0.1, "kl_in_reward": True}}
    with pytest.raises(ConfigError) as err:
        resume_config.check(old, RunConfig.from_dict(switched), weights_only=False)
    assert err.value.field == "algorithm.kl_in_reward"
