"""A TRL script's QLoRA (a bitsandbytes-quantized base under LoRA): one error line saying what to
do instead (the same adapter over the base in a float dtype), before anything is saved or loaded.
bitsandbytes is absent on CPU test machines: the config path is tested with transformers'
``BitsAndBytesConfig`` itself, the model path with a model carrying that config as
``from_pretrained(quantization_config=...)`` leaves it."""

from __future__ import annotations

from pathlib import Path

import pytest

trl = pytest.importorskip("trl")
peft = pytest.importorskip("peft")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from polyrl.errors import ConfigError  # noqa: E402


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


def _args(tmp_path: Path, **kwargs):
    return trl.GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=1, num_generations=2, per_device_train_batch_size=4,
                          max_completion_length=6, use_cpu=True, report_to="none", disable_tqdm=True, bf16=False,
                          **kwargs)


def _qlora() -> object:
    return transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")


def _says_what_to_do(err: ConfigError) -> None:
    assert "QLoRA" in err.message and "bitsandbytes 4-bit" in err.message, err.message
    assert "\n" not in err.message, err.message  # one line, not the quantization config dumped
    assert "without quantization_config" in (err.fix or "") and "bfloat16" in (err.fix or "")


def test_model_init_kwargs_quantization_config_with_peft_config_is_one_line_saying_what_to_do(tiny_model_dir, tmp_path):
    from polyrl.trl import GRPOTrainer

    rows = datasets.Dataset.from_list([{"prompt": "Hi"}] * 4)
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=rows,
                    args=_args(tmp_path, model_init_kwargs={"quantization_config": _qlora()}),
                    peft_config=peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    assert err.value.field.endswith("model_init_kwargs")
    _says_what_to_do(err.value)


def test_from_trl_refuses_a_quantized_base_in_one_line(tmp_path):
    from polyrl.api import GRPOConfig

    with pytest.raises(ConfigError) as err:
        GRPOConfig.from_trl(_args(tmp_path, model_init_kwargs={"quantization_config": _qlora().to_dict()}))
    assert err.value.field == "grpo_config.model_init_kwargs"
    _says_what_to_do(err.value)


def test_a_peft_model_over_a_quantized_base_is_refused_as_the_trainer_is_built(tiny_model_dir, tmp_path):
    """Before: built and saved, then train() failed deep in the engine load (ImportError:
    bitsandbytes) or, with it, loaded the saved quantized folder."""
    pytest.importorskip("polyrl_torch")
    from polyrl.trl import GRPOTrainer

    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    base.config.quantization_config = _qlora()
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"],
                                                      task_type="CAUSAL_LM"))
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=model, reward_funcs=[short], train_dataset=datasets.Dataset.from_list([{"prompt": "Hi"}] * 4),
                    args=_args(tmp_path))
    assert err.value.field == "model"
    _says_what_to_do(err.value)
    assert not (tmp_path / "run" / "initial_model").exists()
