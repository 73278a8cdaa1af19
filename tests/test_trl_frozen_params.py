"""A model object with parameters the script froze: TRL's optimizer (transformers') trains only
the parameters with ``requires_grad``, polyrl every weight it saved, so the frozen ones were trained
without a word. Now one error naming them; with ``peft_config`` TRL freezes the base anyway, so it
stays taken."""

from __future__ import annotations

import pytest

pytest.importorskip("polyrl_torch")
pytest.importorskip("trl")
pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


def _frozen(folder):
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    model.get_input_embeddings().weight.requires_grad_(False)
    return model


def test_a_model_object_with_frozen_parameters_is_refused_naming_them(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"1 of its \d+ parameters frozen \(requires_grad=False: model.embed_tokens")\
            as err:
        GRPOTrainer(model=_frozen(tiny_model_dir), reward_funcs=[short], args=grpo_args(tmp_path),
                    train_dataset=prompts_dataset())
    assert err.value.field == "model" and "peft_config" in err.value.fix
    assert not (tmp_path / "run" / "initial_model").exists()  # refused before anything was saved


def test_frozen_parameters_beside_peft_config_are_taken(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    GRPOTrainer(model=_frozen(tiny_model_dir), reward_funcs=[short], args=grpo_args(tmp_path),
                train_dataset=prompts_dataset(), peft_config=LoraConfig(r=2, target_modules=["q_proj"]))
