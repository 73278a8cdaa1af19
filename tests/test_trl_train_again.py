"""A second ``trainer.train()`` on one ``polyrl.trl.GRPOTrainer``: transformers trains the weights the
first run left (from step 0, a new optimizer); polyrl's run would load the untrained model again."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
pytest.importorskip("trl")
pytest.importorskip("datasets")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


def test_a_second_train_after_one_that_trained_is_one_error_and_keeps_the_first_run(tiny_model_dir, tmp_path):
    """It trained the untrained model again and moved the first run into previous/ without a word
    (TRL's would go on from the trained weights); now one error naming resume_from_checkpoint."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path),
                          train_dataset=prompts_dataset())
    assert trainer.train().global_step == 1
    with pytest.raises(ConfigError) as err:
        trainer.train()
    assert err.value.field == "resume_from_checkpoint" and "save_model" in (err.value.fix or "")
    run = tmp_path / "run"
    assert (run / "model").is_dir() and not (run / "previous").exists()  # the first run stays where it was


def test_a_fresh_train_after_one_that_raised_past_its_first_step_is_one_error_too(tiny_model_dir, tmp_path):
    """A callback raising in step 1's on_step_end: the model was trained there (TRL's next train() goes
    on from those weights); polyrl's next train() started from the untrained model again."""
    from transformers import TrainerCallback

    from polyrl.errors import CallbackError

    class Broken(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            raise RuntimeError("broken")

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path, max_steps=2),
                          train_dataset=prompts_dataset(), callbacks=[Broken()])
    with pytest.raises(CallbackError):
        trainer.train()
    trainer.remove_callback(Broken)
    with pytest.raises(ConfigError) as err:
        trainer.train()
    assert err.value.field == "resume_from_checkpoint" and "1 step" in err.value.message


def _tensors(folder) -> dict:
    from safetensors.numpy import load_file

    return {name: array for path in sorted(folder.glob("*.safetensors")) for name, array in load_file(path).items()}


def test_save_model_after_a_train_that_raised_saves_the_weights_it_trained(tiny_model_dir, tmp_path):
    """A reward raising in step 2: step 1 trained the model (TRL's trainer holds those weights in the
    model object, and save_model saves them); polyrl's save_model copied the untrained model given,
    without a word, and the object kept its untrained weights."""
    import numpy as np
    from transformers import AutoModelForCausalLM

    from polyrl.errors import RewardError

    calls = []

    def flaky(completions, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("flaky")
        return [-len(c) / 10 for c in completions]

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    trainer = GRPOTrainer(model=policy, reward_funcs=[flaky], train_dataset=prompts_dataset(),
                          args=grpo_args(tmp_path, max_steps=2, learning_rate=1e-2))
    with pytest.raises(RewardError):
        trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    saved, base = _tensors(tmp_path / "saved"), _tensors(Path(tiny_model_dir))
    step1 = _tensors(tmp_path / "run" / "checkpoints" / "step-00000001" / "model")
    assert saved.keys() == step1.keys() and all(np.array_equal(saved[k], step1[k]) for k in saved)
    assert any(not np.array_equal(saved[k], base[k]) for k in saved if k in base)
    held = {k: v.detach().numpy() for k, v in trainer.model.state_dict().items()}
    assert trainer.model is policy and all(np.array_equal(held[k], step1[k]) for k in step1 if k in held)
