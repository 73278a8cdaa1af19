"""GRPOConfig fields of TRL's GRPO documentation that TRL reads only in some runs, taken as TRL takes
them: ``vllm_*`` settings unread without ``use_vllm`` (so accepted, not refused), and
``disable_dropout`` read against the dropout the model and its LoRA adapters really have (polyrl
always turns the model's own dropout off, so only a run where TRL's would differ is refused)."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
peft = pytest.importorskip("peft")

from polyrl import api  # noqa: E402
from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args  # noqa: E402
from model_copies import edited_copy  # noqa: E402


_args = functools.partial(grpo_args, max_completion_length=4)


def _dataset():
    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(4)])


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


def _with_dropout(tiny_model_dir: str, tmp_path: Path, **rates: float) -> str:
    """A copy of the tiny model whose config.json sets ``rates`` (as GPT-2's 0.1 everywhere)."""
    return str(edited_copy(tiny_model_dir, tmp_path / "dropout-model", rates))


# --- vllm_* without use_vllm ------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"vllm_importance_sampling_mode": "token_truncate"},
    {"vllm_importance_sampling_cap": 2.0},
    {"vllm_importance_sampling_clip_max": 2.0, "vllm_importance_sampling_clip_min": 0.5},
    {"vllm_mode": "server", "vllm_server_base_url": "http://localhost:8000"},
])
def test_vllm_fields_without_use_vllm_are_unread_as_in_trl(kwargs):
    """TRL's trainer reads every vllm_* field only with use_vllm=True (its importance-sampling
    correction included: without vLLM the sampler is the policy, nothing to correct). A script
    that sets them with use_vllm off trains in TRL; from_trl refused it, pointing at polyrl's
    mismatch correction, which would train another loss than TRL's."""
    base = api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True)).settings
    assert api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True, **kwargs)).settings == base
    assert not any(key.startswith("algorithm.mismatch") for key in base)


def test_ds3_gather_for_generation_without_deepspeed_is_unread_as_in_trl():
    """TRL passes ds3_gather_for_generation to its generation's unwrap, which reads it under
    DeepSpeed ZeRO-3 only; from_trl refused it in a run without a deepspeed config."""
    base = api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True)).settings
    assert api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True, ds3_gather_for_generation=False)).settings == base


def test_vllm_fields_with_use_vllm_are_still_refused_with_it():
    with pytest.raises(ConfigError, match="its own generate backend") as info:
        api.GRPOConfig.from_trl(trl.GRPOConfig(use_cpu=True, use_vllm=True, vllm_importance_sampling_mode="token_mask"))
    assert info.value.field == "grpo_config.use_vllm"
    assert "vllm_importance_sampling_mode" in str(info.value)


def test_a_trl_script_with_vllm_settings_and_no_vllm_trains(tiny_model_dir, tmp_path):
    args = _args(tmp_path, vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=2.0)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=args, train_dataset=_dataset())
    assert trainer.train().global_step == 1
    assert "algorithm.mismatch_correction" not in trainer.grpo_config.settings


# --- disable_dropout ----------------------------------------------------------------------------------

def test_disable_dropout_true_is_what_polyrl_trains_and_is_taken(tiny_model_dir, tmp_path):
    """polyrl turns the model's dropout off (torch engine's disable_dropout): TRL's
    disable_dropout=True is that run, and was refused as a field from_trl did not translate."""
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path, disable_dropout=True),
                          train_dataset=_dataset())
    assert trainer.train().global_step == 1


def test_trls_default_dropout_on_a_model_with_dropout_is_one_error(tiny_model_dir, tmp_path):
    """TRL's default disable_dropout=False trains a model whose config sets dropout with it on;
    polyrl trained it off, without a word. A model without dropout (the tiny Llama) is the same
    run both ways, so TRL's default stays accepted there."""
    GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path), train_dataset=_dataset())
    model = _with_dropout(tiny_model_dir, tmp_path, attention_dropout=0.1, classifier_dropout=0.3)
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=model, reward_funcs=short, args=_args(tmp_path), train_dataset=_dataset())
    assert info.value.field == "args.disable_dropout"
    text = str(info.value)
    assert "attention_dropout = 0.1" in text and "classifier_dropout" not in text  # a head a causal LM never runs
    assert "set disable_dropout=True" in text
    GRPOTrainer(model=model, reward_funcs=short, args=_args(tmp_path, disable_dropout=True), train_dataset=_dataset())


def test_the_python_api_checks_a_trl_configs_dropout_too(tiny_model_dir, tmp_path):
    model = _with_dropout(tiny_model_dir, tmp_path, hidden_dropout=0.1)
    with pytest.raises(ConfigError, match="hidden_dropout = 0.1") as info:
        api.run_config(api.grpo, policy=api.Agent(model), prompts=["What is 1 + 1?"], rewards=[short],
                       grpo_config=_args(tmp_path))
    assert info.value.field == "grpo_config.disable_dropout"
    api.run_config(api.grpo, policy=api.Agent(model), prompts=["What is 1 + 1?"], rewards=[short],
                   grpo_config=_args(tmp_path, disable_dropout=True))
    # polyrl's own GRPOConfig has no disable_dropout: polyrl's behaviour, nothing to check
    api.run_config(api.grpo, policy=api.Agent(model), prompts=["What is 1 + 1?"], rewards=[short],
                   grpo_config=api.GRPOConfig(output_dir=str(tmp_path / "own")))


def test_disable_dropout_with_lora_dropout_is_one_error_naming_both(tiny_model_dir, tmp_path):
    """TRL disables dropout after get_peft_model, so the adapters' lora_dropout is off too; polyrl
    keeps lora.dropout. lora_dropout=0 (the same run in TRL) is taken."""
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path, disable_dropout=True),
                    train_dataset=_dataset(), peft_config=peft.LoraConfig(r=4, lora_dropout=0.05))
    assert info.value.field == "args.disable_dropout"
    assert "lora_dropout = 0.05" in str(info.value) and "set lora_dropout=0.0" in str(info.value)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path, disable_dropout=True),
                train_dataset=_dataset(), peft_config=peft.LoraConfig(r=4, lora_dropout=0.0))
    # TRL's default keeps the adapters' dropout, as polyrl does
    GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path), train_dataset=_dataset(),
                peft_config=peft.LoraConfig(r=4, lora_dropout=0.05))


# --- a streaming train_dataset ------------------------------------------------------------------------

def _stream(n: int):
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)]
    return datasets.Dataset.from_list(rows).to_iterable_dataset()


def _step_prompts(tmp_path: Path) -> list[list[str]]:
    lines = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    steps = sorted({line["step"] for line in lines})
    return [list(dict.fromkeys(line["prompt"] for line in lines if line["step"] == step)) for step in steps]


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_streaming_train_dataset_trains_on_the_prompts_trl_streams_in_its_order(tiny_model_dir, tmp_path,
                                                                                     shuffle):
    """TRL 1.16 trains on an IterableDataset with max_steps set: get_train_dataloader streams it
    through IterableDataset.shuffle(seed=args.seed) (under shuffle_dataset), one generation batch
    after another. polyrl refused it; it now trains those prompts in those steps."""
    args = _args(tmp_path, max_steps=2, shuffle_dataset=shuffle)  # 4 completions in groups of 2: 2 prompts a step
    stream = _stream(12)
    ordered = stream.shuffle(seed=args.seed) if shuffle else stream
    expected = [row["prompt"] for row in itertools.islice(iter(ordered), 4)]
    if shuffle:
        assert expected != [f"What is {i} + 1?" for i in range(4)]  # the buffered shuffle moved them
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=args, train_dataset=stream)
    assert trainer.train().global_step == 2
    assert _step_prompts(tmp_path) == [expected[:2], expected[2:]]
    # transformers' epoch for a stream without a length: the updates over max_steps
    assert [m["epoch"] for m in trainer.state.log_history[:2]] == [0.5, 1.0]


def test_a_stream_without_max_steps_or_shorter_than_it_is_one_error(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="without max_steps") as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path, max_steps=-1), train_dataset=_stream(8))
    assert info.value.field == "train_dataset"
    with pytest.raises(ConfigError, match="an IterableDataset of 3 rows, and max_steps = 2 reads 4 prompts") as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=short, args=_args(tmp_path, max_steps=2), train_dataset=_stream(3))
    assert info.value.field == "train_dataset"
