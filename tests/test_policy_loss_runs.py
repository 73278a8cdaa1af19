"""GSPO, CISPO, SAPO, VESPO and LUSPO train the tiny Llama end to end on torch (the reward rises),
and a hybrid run (MLX samples, torch trains) logs the sampler-trainer mismatch every step and corrects it."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.registry import get_registry
from polyrl.trainer import Trainer

from digits_run import digits_config

MISMATCH_KEYS = ("mismatch_abs", "mismatch_kl", "mismatch_over", "mismatch_corrected")


def _usable(name: str) -> None:
    from polyrl.errors import BackendUnavailable

    try:
        status = get_registry().status(name)
    except BackendUnavailable as exc:  # its plugin is not installed (the GPU machines carry no MLX)
        pytest.skip(f"backend {name!r} not installed here: {exc}")
    if not status.available:
        pytest.skip(f"backend {name!r} not usable here: {status.reason}")


def _run(tiny_model_dir, tmp_path, algorithm: dict, train: str = "torch", generate: str = "torch",
         steps: int = 30) -> list[dict]:
    _usable(train)
    _usable(generate)
    config = digits_config(tiny_model_dir, tmp_path, algorithm, train=train, generate=generate, steps=steps)
    return Trainer(config).run(progress=False)["history"]


@pytest.mark.parametrize("name", ["gspo", "cispo", "sapo", "vespo", "luspo"])
def test_torch_run_raises_the_reward(name, tiny_model_dir, tmp_path):
    history = _run(tiny_model_dir, tmp_path, {"name": name})
    rewards = [m["reward_mean"] for m in history]
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.15, rewards
    # torch sampled and torch trains: the same numbers up to float noise
    assert max(m["mismatch_abs"] for m in history if "mismatch_abs" in m) < 1e-3


def test_hybrid_run_measures_and_corrects_the_mismatch(tiny_model_dir, tmp_path):
    history = _run(tiny_model_dir, tmp_path, {"name": "grpo", "mismatch_correction": "tis", "mismatch_cap": 2.0},
                   train="torch", generate="mlx", steps=4)
    trained = [m for m in history if not m.get("skipped")]
    assert trained
    for m in trained:
        for key in MISMATCH_KEYS:
            assert np.isfinite(m[key]) and m[key] >= 0, (key, m)
    # two implementations of the same weights never agree to the last bit
    assert max(m["mismatch_abs"] for m in trained) > 0
    for m in trained:  # TRL's names for the same numbers, the ratio's after the cap
        assert m["sampling/sampling_logp_difference/mean"] == m["mismatch_abs"] <= m["mismatch_abs_max"]
        assert 0 < m["sampling/importance_sampling_ratio/min"] <= m["sampling/importance_sampling_ratio/mean"] \
            <= m["sampling/importance_sampling_ratio/max"] <= 2.0
    print("hybrid mismatch:", [{k: f"{m[k]:.3g}" for k in MISMATCH_KEYS} for m in trained])


def test_torch_entropy_is_the_entropy_of_the_models_distribution(tiny_model_dir):
    import torch

    from polyrl.engine import Engine
    from polyrl.types import EngineConfig, OptimizerConfig, TokenSequence
    from polyrl_torch.scoring import token_logprobs, token_logprobs_with_entropy

    _usable("torch")
    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="train", threads=1,
                                                          optimizer=OptimizerConfig(lr=1e-3))).raw
    seqs = [TokenSequence([1, 5, 9], [7, 3, 11]), TokenSequence([1, 5, 9], [4])]
    with torch.no_grad():
        logp, ent = token_logprobs_with_entropy(engine, seqs, 0.7)
        plain = token_logprobs(engine, seqs, 0.7)
        ids = torch.tensor([[1, 5, 9, 7, 3, 11]], device=engine.device)
        logits = engine.causal_lm(ids).logits[0, 2:5].float() / 0.7
        full = torch.log_softmax(logits, -1)
    for a, b in zip(logp, plain):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(ent[0], -(full.exp() * full).sum(-1), rtol=1e-5, atol=1e-5)
    assert ent[1].shape == (1,)


@pytest.mark.parametrize(("train", "generate"), [("torch", "torch"), ("mlx", "mlx")])
def test_entropy_bonus_and_selection_train_on_both_backends(train, generate, tiny_model_dir, tmp_path):
    history = _run(tiny_model_dir, tmp_path, {"name": "grpo", "entropy_coef": 0.01, "top_entropy_quantile": 0.2},
                   train=train, generate=generate, steps=3)
    trained = [m for m in history if not m.get("skipped")]
    assert trained
    for m in trained:
        assert np.isfinite(m["loss"]) and m["entropy"] > 0
        assert 0.15 < m["entropy_selected"] <= 0.3  # the top 20% of the tokens (ties aside)


def test_mask_truncated_completions_leaves_cut_completions_out(tiny_model_dir, tmp_path):
    plain = _run(tiny_model_dir, tmp_path / "plain", {"name": "grpo"}, steps=1)
    masked = _run(tiny_model_dir, tmp_path / "masked", {"name": "grpo", "mask_truncated_completions": True}, steps=1)
    assert plain[0]["tokens"] > 0
    # the random tiny model rarely stops within 12 tokens: most completions are cut, and go
    assert masked[0].get("tokens", 0) < plain[0]["tokens"]
