"""Reference refresh (``algorithm.ref_sync_every``): the mix, a real torch run, and exact resume."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.config import RunConfig
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.ref_sync import mix_weights
from polyrl.registry import get_registry
from polyrl.types import EngineConfig

BASE = {"data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]}
#: varies within every group (a constant reward gives zero advantages and no update at all)
LENGTH_REWARD = "def length(prompts, completions, **kwargs):\n    return [len(set(str(c))) / 10 for c in completions]\n"


def test_mix_is_alpha_policy_plus_rest_reference_and_refuses_other_tensors():
    policy = {"w": np.array([1.0, 3.0], np.float32)}
    ref = {"w": np.array([0.0, 1.0], np.float32)}
    np.testing.assert_allclose(mix_weights(policy, ref, 0.6)["w"], [0.6, 2.2], rtol=1e-6)
    assert mix_weights(policy, ref, 0.6)["w"].dtype == np.float32
    with pytest.raises(ConfigError, match="ref_sync_every"):
        mix_weights({"v": policy["w"]}, ref, 0.5)


def test_ref_sync_fields_are_validated():
    for key, value in (("ref_sync_every", -1), ("ref_sync_alpha", 0.0), ("ref_sync_alpha", 1.5)):
        with pytest.raises(ConfigError, match=f"algorithm.{key}"):
            RunConfig.from_dict({**BASE, "model": {"path": "tiny-llama"}, "algorithm": {key: value}})


def _config(model: str, out, steps: int, **train) -> RunConfig:
    reward = out.parent / "length_reward.py"
    reward.write_text(LENGTH_REWARD)
    return RunConfig.from_dict({
        **BASE, "model": {"path": model}, "rewards": [{"function": f"{reward}:length"}],
        "generation": {"group_size": 2, "max_new_tokens": 6},
        "algorithm": {"beta": 0.1, "ref_sync_every": 2, "ref_sync_alpha": 0.5},
        "optimizer": {"lr": 1e-2},
        "lora": {"rank": 4, "alpha": 8.0},
        "train": {"steps": steps, "prompts_per_step": 2, "threads": 1, "output_dir": str(out), **train}})


def _weights(engine: Engine) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float32) for k, v in engine.export_weights().items()}


def test_refresh_mixes_the_policy_into_the_reference_and_resumes_exactly(tiny_model_dir, tmp_path):
    from polyrl.trainer import Trainer

    reg = get_registry()
    if not reg.status("torch").available:
        pytest.skip("torch backend not usable")
    initial = _weights(Engine(reg, "torch", EngineConfig(model=tiny_model_dir, role="generate")))

    two = Trainer(_config(tiny_model_dir, tmp_path / "two", steps=2))
    assert two.ref_engine is not None  # LoRA would otherwise use its own frozen base
    two.run(progress=False)
    ref, policy = _weights(two.ref_engine), _weights(two.train_engine)
    for k in ref:
        np.testing.assert_allclose(ref[k], 0.5 * policy[k] + 0.5 * initial[k], atol=1e-6, err_msg=k)
    assert any(not np.allclose(ref[k], initial[k]) for k in ref)

    full = Trainer(_config(tiny_model_dir, tmp_path / "full", steps=4))
    full.run(progress=False)
    Trainer(_config(tiny_model_dir, tmp_path / "cut", steps=3, checkpoint_every=3)).run(progress=False)
    resumed = Trainer(_config(tiny_model_dir, tmp_path / "cut", steps=4, checkpoint_every=3))
    assert resumed.resume()
    resumed.run(progress=False)
    for a, b in ((full.ref_engine, resumed.ref_engine), (full.train_engine, resumed.train_engine)):
        wa, wb = _weights(a), _weights(b)
        for k in wa:
            np.testing.assert_allclose(wa[k], wb[k], atol=1e-6, err_msg=k)
