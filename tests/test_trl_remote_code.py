"""The TRL drop-in never runs a model folder's own Python: its tokenizer, config and model loads
passed no ``trust_remote_code``, so transformers 5 asked "Do you wish to run the custom code?
[y/N]" on a terminal and a "y" (given here, as the backends' tests give it) ran the folder's code
though the run's ``model.trust_remote_code`` is false. Now one ``error:`` line naming the files.

Real transformers and torch on the tiny random Llama; each test's transformers modules cache is its own.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_copies import own_model_code_copy, own_tokenizer_code_copy

pytest.importorskip("polyrl_torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")
pytest.importorskip("datasets")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


@pytest.fixture(autouse=True)
def answer_yes(tmp_path, monkeypatch):
    """A user answering transformers' prompt "y", and transformers' copies of a folder's code kept
    in this test's own modules cache (none is found by a later test)."""
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr("builtins.input", lambda *_: "y")
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = {name for name in sys.modules if name.split(".")[0] == "transformers_modules"}
    for name in before:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == "transformers_modules" and n not in before]:
        del sys.modules[name]


_COPIES = {"tokenizer": own_tokenizer_code_copy, "model": own_model_code_copy}


@contextlib.contextmanager
def _own_code(kind: str, tiny_model_dir: str, tmp_path: Path) -> Iterator[Path]:
    """A copy of the tiny model whose folder holds its own ``kind`` code (tokenizer, or config
    and model); on leaving, asserts that none of that code ran."""
    marker = tmp_path / "code-ran"
    yield _COPIES[kind](tiny_model_dir, tmp_path / f"custom-{kind}", marker)
    assert not marker.exists(), "the folder's own code ran"


def _refused(call, field: str, files: str) -> None:
    with pytest.raises(ConfigError) as err:
        call()
    text = str(err.value)
    assert "\n" not in text and "hf.co" not in text, text
    assert err.value.field == field and files in text and "model.trust_remote_code = true" in text, text


def test_processing_class_of_a_folder_with_its_own_tokenizer_code_runs_none(tiny_model_dir, tmp_path):
    with _own_code("tokenizer", tiny_model_dir, tmp_path) as folder:
        trainer = GRPOTrainer(model=str(folder), reward_funcs=[short], args=grpo_args(tmp_path),
                              train_dataset=prompts_dataset())
        _refused(lambda: trainer.processing_class, "model", "tokenization_x.py")


def test_trainer_model_of_a_folder_with_its_own_modelling_code_runs_none(tiny_model_dir, tmp_path):
    with _own_code("model", tiny_model_dir, tmp_path) as folder:
        trainer = GRPOTrainer(model=str(folder), reward_funcs=[short], args=grpo_args(tmp_path),
                              train_dataset=prompts_dataset())
        _refused(lambda: trainer.model, "model", "configuration_custom.py, modeling_custom.py")


def test_a_model_object_whose_folder_tokenizer_is_its_own_code_runs_none(tiny_model_dir, tmp_path):
    """A model object given without processing_class: the tokenizer beside its weights."""
    with _own_code("tokenizer", tiny_model_dir, tmp_path) as folder:
        model = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
        _refused(lambda: GRPOTrainer(model=model, reward_funcs=[short], args=grpo_args(tmp_path),
                                     train_dataset=prompts_dataset()), "processing_class", "tokenization_x.py")


def test_a_reward_model_object_whose_tokenizer_is_its_own_code_runs_none(tiny_model_dir, tmp_path):
    with _own_code("tokenizer", tiny_model_dir, tmp_path) as folder:
        reward = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=1)
        _refused(lambda: GRPOTrainer(model=tiny_model_dir, reward_funcs=[reward], args=grpo_args(tmp_path),
                                     train_dataset=prompts_dataset()), "reward_funcs[0]", "tokenization_x.py")


def test_the_trackers_model_config_of_a_folder_with_its_own_config_code_runs_none(tiny_model_dir, tmp_path):
    """The model config trl_run reads for the trackers: none (as for any folder it cannot read)."""
    from polyrl import trl_run

    with _own_code("model", tiny_model_dir, tmp_path) as folder:
        assert trl_run.model_config(grpo_args(tmp_path), None, str(folder), "float32") is None


def test_the_torch_lora_startup_check_of_a_folder_with_its_own_config_code_runs_none(tiny_model_dir, tmp_path):
    """The check of LoRA targets on the model built from config.json (a TRL script's peft_config):
    silent here, the engine's load then refuses the folder."""
    from polyrl.types import EngineConfig, LoraConfig
    from polyrl_torch.startup_check import check_model

    with _own_code("model", tiny_model_dir, tmp_path) as folder:
        check_model(EngineConfig(model=str(folder), role="train", lora=LoraConfig(rank=2, alpha=4)))
