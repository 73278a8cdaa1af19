"""A script's trl.GRPOConfig changed between GRPOTrainer(...) and train(): TRL reads trainer.args
again in train(), polyrl read them once when the trainer was built, so the change was trained
without a word; now one error naming the field."""

from __future__ import annotations

import pytest

pytest.importorskip("polyrl_torch")
pytest.importorskip("trl")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


def _build(model, tmp_path):
    return GRPOTrainer(model=model, reward_funcs=[short], args=grpo_args(tmp_path), train_dataset=prompts_dataset())


def test_args_changed_between_building_the_trainer_and_train_are_refused_by_name(tiny_model_dir, tmp_path):
    """TRL reads trainer.args again in train(); polyrl read them when the trainer was built, so
    ``trainer.args.max_steps = 3`` trained the 1 step the config first said."""
    trainer = _build(tiny_model_dir, tmp_path)
    trainer.args.max_steps = 3
    with pytest.raises(ConfigError, match=r"args.max_steps = 3 \(it was 1\) changed after GRPOTrainer was built") \
            as err:
        trainer.train()
    assert err.value.field == "args.max_steps" and "before GRPOTrainer(...)" in err.value.fix
