"""polyrl.trl.GRPOTrainer: a TRL script with its import changed trains on polyrl, with TRL's
own GRPOConfig, a 🤗 Dataset and TRL-style reward functions; what polyrl cannot honour is one
ConfigError naming the argument, before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402


def _args(tmp_path: Path, **kwargs):
    values = dict(output_dir=str(tmp_path / "run"), max_steps=2, num_generations=2, per_device_train_batch_size=4,
                  max_completion_length=6, learning_rate=1e-4, use_cpu=True, report_to="none", disable_tqdm=True)
    return trl.GRPOConfig(**{**values, **kwargs})


def _dataset(n: int = 4):
    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)])


def short(completions, answer, **kwargs):
    """A TRL-style reward: keyword columns, one float per completion."""
    assert len(answer) == len(completions)
    return [-len(c) / 10 for c in completions]


def test_a_trl_script_with_its_import_changed_trains_and_saves(tiny_model_dir, tmp_path):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset())
    out = trainer.train()
    assert out.global_step == 2 and trainer.state.global_step == 2
    assert out.training_loss == pytest.approx(sum(m["loss"] for m in trainer.summary["history"]) / 2)
    assert out.metrics["train_loss"] == out.training_loss and out.metrics["train_runtime"] > 0
    # TRL's names in the log history, polyrl's files in output_dir
    assert [m["step"] for m in trainer.state.log_history] == [1, 2]
    assert "reward" in trainer.state.log_history[-1] and "rewards/short/mean" in trainer.state.log_history[-1]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    trainer.save_model(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "config.json").is_file()
    assert any(p.suffix == ".safetensors" for p in (tmp_path / "saved").iterdir())


def test_trls_batch_arithmetic_reaches_the_run(tiny_model_dir, tmp_path):
    """per_device_train_batch_size 4 completions in groups of num_generations 2: 2 prompts a step."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path, max_steps=1),
                          train_dataset=_dataset())
    trainer.train()
    completions = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert len(completions) == 4 and len({c["prompt"] for c in completions}) == 2
    assert all(c["finish_reason"] in ("stop", "length") for c in completions)
    assert trainer.summary["history"][0]["completions/max_length"] <= 6  # max_completion_length


def test_resume_from_checkpoint_continues_the_run(tiny_model_dir, tmp_path):
    first = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=1, save_steps=1),
                        train_dataset=_dataset())
    first.train()
    again = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path, max_steps=2, save_steps=1),
                        train_dataset=_dataset())
    out = again.train(resume_from_checkpoint=True)
    assert out.global_step == 2
    assert [m["step"] for m in again.state.log_history] == [1, 2]


def test_resuming_where_no_checkpoint_is_refused_as_trl_does(tiny_model_dir, tmp_path):
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset())
    with pytest.raises(ConfigError) as err:
        trainer.train(resume_from_checkpoint=True)
    assert err.value.field == "resume_from_checkpoint"


def test_a_model_object_is_trained_from_a_saved_copy(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():  # an edited model: its weights are no longer the folder's
        model.lm_head.weight.mul_(0.5)
    trainer = GRPOTrainer(model=model, reward_funcs=[short], args=_args(tmp_path, max_steps=1),
                          train_dataset=_dataset())
    saved = Path(trainer.model_path)
    assert saved == tmp_path / "run" / "initial_model"
    reloaded = AutoModelForCausalLM.from_pretrained(saved)
    assert torch.equal(reloaded.lm_head.weight, model.lm_head.weight)
    assert (saved / "tokenizer_config.json").is_file()
    assert trainer.train().global_step == 1


def test_peft_config_is_polyrls_lora(tiny_model_dir, tmp_path):
    peft = pytest.importorskip("peft")
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path),
                          train_dataset=_dataset(), peft_config=peft.LoraConfig(r=4, lora_alpha=8))
    assert trainer.policy.lora is not None and trainer.policy.lora.rank == 4 and trainer.policy.lora.alpha == 8


class _Callback:
    pass


@pytest.mark.parametrize("name, value", [
    ("callbacks", [_Callback()]), ("tools", [short]), ("rollout_func", short),
    ("environment_factory", object), ("quantization_config", object()), ("reward_processing_classes", object()),
    ("optimizers", (object(), None)),
])
def test_trainer_arguments_polyrl_would_not_use_are_refused_by_name(tiny_model_dir, tmp_path, name, value):
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                    **{name: value})
    assert err.value.field == name and err.value.fix


def test_an_eval_dataset_is_refused_only_where_trl_would_evaluate_on_it(tiny_model_dir, tmp_path):
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                eval_dataset=_dataset(2))  # eval_strategy "no": TRL never reads it in train()
    with pytest.raises(ConfigError) as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(), eval_dataset=_dataset(2),
                    args=_args(tmp_path, eval_strategy="steps", eval_steps=1))
    assert err.value.field == "grpo_config.eval_strategy"


def test_missing_rewards_or_dataset_and_an_iterable_dataset_are_one_error_each(tiny_model_dir, tmp_path):
    for kwargs, field in [({"train_dataset": _dataset()}, "reward_funcs"),
                          ({"reward_funcs": [short]}, "train_dataset"),
                          ({"reward_funcs": [short], "train_dataset": _dataset().to_iterable_dataset()},
                           "train_dataset")]:
        with pytest.raises(ConfigError) as err:
            GRPOTrainer(model=tiny_model_dir, args=_args(tmp_path), **kwargs)
        assert err.value.field == field


def test_a_processing_class_other_than_the_folders_tokenizer_is_refused(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    own = AutoTokenizer.from_pretrained(tiny_model_dir)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                processing_class=own)  # the folder's own: accepted
    edited = AutoTokenizer.from_pretrained(tiny_model_dir)
    edited.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ConfigError, match="chat template") as err:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=_args(tmp_path), train_dataset=_dataset(),
                    processing_class=edited)
    assert err.value.field == "processing_class"


def test_importing_grpo_config_from_here_says_to_keep_trls():
    with pytest.raises(ImportError, match="from trl import GRPOConfig"):
        from polyrl.trl import GRPOConfig  # noqa: F401
