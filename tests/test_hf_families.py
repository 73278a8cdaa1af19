"""Bring-your-own-model on torch: families beyond the Llama-like ones, against their own forward.

Each tiny model (``hf_families.build_family_model``: transformers' own config classes, the family's
quirks) samples, scores, trains one step and syncs its weights to a generate engine. The sampler's
log-probs must equal the trainer's, and both must equal the model's own eager forward (HF's
reference implementation): a backend path that drops a family's quirk (Gemma 2's attention
soft-cap, Granite's logit scaling, GPT-2's dropout in the training forward) agrees with itself but
not with the model, which only the second comparison sees.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hf_families import FAMILIES, build_family_model, largest_gap, sample_and_train_as_its_own_forward

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

CHATS = [[{"role": "user", "content": "What is 2 + 3? Answer with the number only."}],
         [{"role": "user", "content": "Hi"}]]  # two prompt lengths: the sampler left-pads
#: float32 error of two kernels (SDPA vs eager) over a few layers
FLOAT_ERROR = 2e-5


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


def _engine(path: str, role: str = "train", **extra) -> Engine:
    return Engine(get_registry(), "torch", EngineConfig(
        model=path, role=role, threads=1, optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=None), **extra))




@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_family_samples_scores_trains_and_syncs_as_its_own_forward(model_type, models):
    path = build_family_model(model_type, models / model_type)
    trainer = _engine(path)
    seqs, after = sample_and_train_as_its_own_forward(trainer, path, CHATS, 10, FLOAT_ERROR)
    generator = _engine(path, "generate")
    generator.import_weights(trainer.export_weights())
    assert largest_gap(after, generator.logprobs(seqs, 1.0)) < FLOAT_ERROR
    fresh = generator.generate(CHATS, SamplingParams(max_new_tokens=8, n=2, seed=1))
    assert largest_gap([c.logprobs for c in fresh], trainer.logprobs([TokenSequence.of(c) for c in fresh], 1.0)) < FLOAT_ERROR


def _lora_targets(engine: Engine) -> set[str]:
    from peft.tuners.lora import LoraLayer

    return {n.rsplit(".", 1)[-1] for n, m in engine.raw.model.named_modules() if isinstance(m, LoraLayer)}


@pytest.mark.parametrize("model_type, expected", [
    ("gpt2", {"c_attn", "c_proj", "c_fc"}),
    ("qwen3_moe", {"q_proj", "k_proj", "v_proj", "o_proj"}),  # the fused experts are no linear layers
])
def test_default_lora_adapts_the_familys_linear_layers_and_stays_exact(model_type, expected, models):
    path = build_family_model(model_type, models / model_type)
    with warnings.catch_warnings():  # GPT-2's Conv1D layers: fan_in_fan_out said up front, no peft warning
        warnings.filterwarnings("error", message=".*fan_in_fan_out.*")
        engine = _engine(path, lora=LoraConfig(rank=2, alpha=4))
    assert _lora_targets(engine) == expected
    seqs = [TokenSequence.of(c) for c in engine.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=0))]
    assert not engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs))), Objective()).skipped
    out = engine.generate(CHATS, SamplingParams(max_new_tokens=6, n=2, seed=1))  # from the folded adapters
    assert largest_gap([c.logprobs for c in out], engine.logprobs([TokenSequence.of(c) for c in out], 1.0)) < FLOAT_ERROR
    generator = _engine(path, "generate")
    generator.import_weights(engine.export_weights())
    seqs = [TokenSequence.of(c) for c in out]
    assert largest_gap(engine.logprobs(seqs, 1.0), generator.logprobs(seqs, 1.0)) < FLOAT_ERROR


@pytest.mark.faults
def test_lora_target_names_of_another_family_are_refused_naming_this_ones(models):
    path = build_family_model("gpt2", models / "gpt2")
    with pytest.raises(ConfigError) as err:
        _engine(path, lora=LoraConfig(rank=2, alpha=4, target_modules=("q_proj", "v_proj")))
    assert err.value.field == "lora.target_modules"
    assert "c_attn" in err.value.fix and "q_proj" in str(err.value)


@pytest.mark.faults
def test_an_untested_family_whose_logits_the_scorer_cannot_reproduce_is_refused_at_load(models, monkeypatch):
    """Granite as an untested ("*") family: loads while the scorer knows its logit scaling, and is
    refused (one ConfigError naming the model type) when it does not, standing for a family whose
    forward transforms its logits in a way polyrl does not know."""
    from polyrl_torch import output_head, plugin, scoring

    path = build_family_model("granite", models / "granite")
    monkeypatch.delitem(plugin.ARCHITECTURES, "granite")
    _engine(path, "generate")  # the probe passes
    monkeypatch.setattr(scoring, "head_transform", lambda config: output_head.HeadTransform())
    with pytest.raises(ConfigError) as err:
        _engine(path, "generate")
    assert err.value.field == "model.path" and "'granite'" in str(err.value)
