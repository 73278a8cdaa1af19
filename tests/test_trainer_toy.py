"""The core loop end to end on the numpy toy backend (a real entry-point plugin, no torch)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polyrl import checkpoint as ckpt
from polyrl.config import RunConfig
from polyrl.errors import ConfigError, RewardError
from polyrl.trainer import Trainer


def toy_config(tmp_path, **train) -> dict:
    return {
        "model": {"path": "toy-model"},
        "backends": {"train": "toy"},
        "generation": {"group_size": 4, "max_new_tokens": 8},
        "algorithm": {"name": "grpo"},
        "optimizer": {"lr": 8.0},
        "data": {"task": "arithmetic", "options": {"count": 64}},
        "rewards": [{"name": "toy_sevens"}],
        "train": {"steps": 40, "prompts_per_step": 4, "output_dir": str(tmp_path / "run"), **train},
    }


@pytest.mark.parametrize("algorithm", ["grpo", "dapo", "dr_grpo", "rloo", "reinforce", "gspo", "cispo", "sapo",
                                       "vespo", "luspo"])
def test_reward_rises_for_every_algorithm(toy, tmp_path, algorithm):
    data = toy_config(tmp_path)
    data["algorithm"] = {"name": algorithm}
    summary = Trainer(RunConfig.from_dict(data)).run(progress=False)
    rewards = [m["reward_mean"] for m in summary["history"]]
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.15, rewards
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 40
    first = json.loads(lines[0])
    for key in ("reward_mean", "reward_std", "loss", "grad_norm", "clip_fraction",
                "tokens_per_s", "time/generate", "time/train"):
        assert key in first, key
    algo = RunConfig.from_dict(data).algorithm
    # kl only where the loss has a KL term: a 0 logged without one reads as "no drift" (TRL omits it)
    assert ("kl" in first) == (algo.beta > 0 and not algo.kl_in_reward), (algorithm, first.get("kl"))


def test_multiple_iterations_use_old_logprobs_and_clip(toy, tmp_path):
    data = toy_config(tmp_path, steps=6)
    data["algorithm"] = {"name": "grpo", "num_iterations": 3, "epsilon": 0.05}
    summary = Trainer(RunConfig.from_dict(data)).run(progress=False)
    assert any(m["clip_fraction"] > 0 for m in summary["history"])


def test_resume_continues_exactly(toy, tmp_path):
    full = Trainer(RunConfig.from_dict(toy_config(tmp_path / "a", steps=8)))
    full.run(progress=False)
    expected = full.train_engine.raw.logits.copy()

    first = Trainer(RunConfig.from_dict(toy_config(tmp_path / "b", steps=5, checkpoint_every=3)))
    first.run(progress=False)  # checkpoints at steps 3 and 5, like a run stopped at step 5
    # a crash mid-write leaves only a temp dir, which is never chosen
    (tmp_path / "b" / "run" / "checkpoints" / ".tmp-step-00000006").mkdir()
    resumed = Trainer(RunConfig.from_dict(toy_config(tmp_path / "b", steps=8, checkpoint_every=3)))
    assert resumed.resume()
    assert resumed.step == 5
    resumed.run(progress=False)
    np.testing.assert_array_equal(resumed.train_engine.raw.logits, expected)


def test_incomplete_checkpoint_is_never_chosen(tmp_path):
    root = tmp_path / "ck"
    ckpt.write_checkpoint(root, 1, {"step": 1}, lambda model, state: None)
    broken = root / "step-00000002"
    broken.mkdir()
    (broken / "trainer_state.json").write_text("{")
    assert ckpt.latest_checkpoint(root).name == "step-00000001"


def test_unknown_model_is_a_clear_error(toy, tmp_path):
    data = toy_config(tmp_path)
    data["model"] = {"path": "no/such/model"}
    with pytest.raises(ConfigError, match="model.path"):
        Trainer(RunConfig.from_dict(data))


def test_reward_function_with_wrong_length_is_named(toy, tmp_path):
    (tmp_path / "bad_reward.py").write_text(
        "def short(prompts, completions, **kw):\n    return [1.0]\n"
    )
    data = toy_config(tmp_path, steps=1)
    data["rewards"] = [{"function": f"{tmp_path / 'bad_reward.py'}:short"}]
    with pytest.raises(RewardError, match="short"):
        Trainer(RunConfig.from_dict(data)).run(progress=False)


def test_python_api_runs_the_same_loop(toy, tmp_path):
    from polyrl import api

    def sevens(prompts, completions, completion_ids, **columns):
        return [float(np.mean(np.asarray(ids) == 7)) for ids in completion_ids]

    summary = api.run(
        api.grpo,
        policy=api.Agent("toy-model", backend="toy"),
        prompts=[f"p{i}" for i in range(8)],
        rewards=[sevens],
        generation_config=api.GenerationConfig(max_new_tokens=8, group_size=4),
        grpo_config=api.GRPOConfig(steps=20, prompts_per_step=4, learning_rate=8.0,
                                   output_dir=str(tmp_path / "api")),
        progress=False,
    )
    rewards = [m["reward_mean"] for m in summary["history"]]
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.2


def test_data_shuffle_false_draws_prompts_in_the_datasets_order(toy, tmp_path):
    data = toy_config(tmp_path, steps=1)
    data["data"]["shuffle"] = False
    ordered = Trainer(RunConfig.from_dict(data))
    assert [ordered.sampler.next_indices() for _ in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    shuffled = Trainer(RunConfig.from_dict(toy_config(tmp_path / "b", steps=1)))
    assert shuffled.sampler.next_indices() != [0, 1, 2, 3]
