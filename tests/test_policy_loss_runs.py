"""GSPO and CISPO train the tiny Llama end to end on torch (the reward rises), and a hybrid run
(MLX samples, torch trains) logs the sampler-trainer mismatch every step and corrects it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polyrl.config import RunConfig
from polyrl.registry import get_registry
from polyrl.trainer import Trainer

REWARD = """
def digits(prompts, completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]
"""
MISMATCH_KEYS = ("mismatch_abs", "mismatch_kl", "mismatch_over", "mismatch_corrected")


def _usable(name: str) -> None:
    status = get_registry().status(name)
    if not status.available:
        pytest.skip(f"backend {name!r} not usable here: {status.reason}")


def _run(tiny_model_dir, tmp_path, algorithm: dict, train: str = "torch", generate: str = "torch",
         steps: int = 30) -> list[dict]:
    _usable(train)
    _usable(generate)
    (tmp_path / "reward.py").write_text(REWARD)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Write numbers {i}:"}) + "\n" for i in range(16)))
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir},
        "backends": {"train": train, "generate": generate},
        "generation": {"group_size": 8, "max_new_tokens": 12},
        "algorithm": algorithm,
        "optimizer": {"lr": 3e-3},
        "data": {"path": str(prompts)},
        "rewards": [{"function": f"{tmp_path / 'reward.py'}:digits"}],
        "train": {"steps": steps, "prompts_per_step": 4, "threads": 1, "output_dir": str(tmp_path / "run")},
    })
    return Trainer(config).run(progress=False)["history"]


@pytest.mark.parametrize("name", ["gspo", "cispo"])
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
    print("hybrid mismatch:", [{k: f"{m[k]:.3g}" for k in MISMATCH_KEYS} for m in trained])
