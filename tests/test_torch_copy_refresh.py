"""The sampler's copy refreshed tensor by tensor (``polyrl_torch.generation_weights``) on real tiny Llamas.

After each train step the copy recomputes only the values whose sources changed. It must then
hold exactly what a copy made afresh from the same engine holds (every tensor, bit for bit) and
sample the same tokens with the same log-probs, with LoRA and full weights, tied and untied heads,
packed float32 and unpacked bfloat16; under LoRA the frozen embeddings, norms and head must not be
reloaded or re-packed; and writes the optimizer does not make (in place, a new storage, an
adapter's scale) must still be seen.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

torch = pytest.importorskip("torch")

PROMPTS = ["hello there", "count to three"]
#: packed float32 (the CPU default), and bfloat16 compute unpacked (weights loaded, the head tied by alias)
MODES: dict[str, dict[str, Any]] = {"packed": {}, "bfloat16": {"compute_dtype": "bfloat16", "options": {"packed_generation": False}}}


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def model_dir(request, tmp_path_factory) -> str:
    from polyrl.testing.tiny_model import build_tiny_model

    tie = request.param
    return build_tiny_model(tmp_path_factory.mktemp("models") / f"llama-{tie}", arch="llama", tie_word_embeddings=tie)


def _engine(model_dir: str, lora: bool, mode: str = "packed") -> Engine:
    kw = dict(MODES[mode])
    engine = Engine(get_registry(), "torch", EngineConfig(
        model=model_dir, threads=1, seed=0, optimizer=OptimizerConfig(lr=1e-2),
        lora=LoraConfig(rank=4, alpha=8) if lora else None, **kw))
    engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=2, seed=0))  # the copy made (a full refresh)
    if engine.raw.generation_copy is None:
        pytest.skip("this CPU samples without a copy (no oneDNN packing for float32 here)")
    return engine


def _train(engine: Engine, seed: int) -> list:
    completions = engine.generate(PROMPTS, SamplingParams(max_new_tokens=8, n=2, seed=seed, temperature=1.0))
    seqs = [TokenSequence.of(c) for c in completions]
    metrics = engine.train_step(TrainBatch(seqs, np.array([1.0, -1.0, 1.0, -1.0], dtype=np.float32)), Objective())
    assert not metrics.skipped
    return completions


def _tensors(copy) -> dict[str, Any]:
    """Every tensor the copy samples with: its state dict and each packed weight (unpacked again)."""
    out = {name: value.detach().clone() for name, value in copy.model.state_dict().items()}
    out.update({f"{name} (packed)": module.packed.to_dense() for name, module in copy.packed.items()})
    return out


def _fresh(engine: Engine):
    """A copy made afresh from the engine's weights now: what a full refresh holds."""
    from polyrl_torch.generation_weights import GenerationCopy

    fresh = GenerationCopy(engine.raw)
    fresh.current(engine.raw)
    return fresh


def _assert_as_fresh(engine: Engine) -> None:
    """The engine's copy, refreshed, holds every tensor a fresh copy does, bit for bit, and samples
    the same tokens with the same log-probs."""
    sampling = SamplingParams(max_new_tokens=8, n=2, seed=7, temperature=1.0)
    kept = engine.raw.generation_copy
    ours = engine.generate(PROMPTS, sampling)
    fresh = _fresh(engine)
    have, want = _tensors(kept), _tensors(fresh)
    assert have.keys() == want.keys()
    differ = [name for name in want if not torch.equal(have[name], want[name])]
    assert not differ, f"{len(differ)} of {len(want)} copy tensors differ from a full refresh, e.g. {differ[:3]}"
    engine.raw.generation_copy = fresh
    try:
        theirs = engine.generate(PROMPTS, sampling)
    finally:
        engine.raw.generation_copy = kept
    assert [list(c.completion_ids) for c in ours] == [list(c.completion_ids) for c in theirs]
    assert all(np.array_equal(a.logprobs, b.logprobs) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_copy_after_train_steps_is_what_a_full_refresh_makes(model_dir, lora, mode):
    engine = _engine(model_dir, lora, mode)
    for step in range(3):
        _train(engine, seed=step)
        _assert_as_fresh(engine)


def _adapted(name: str) -> bool:
    return any(f".{proj}." in name for proj in ("q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"))


def test_a_lora_step_reloads_only_the_adapted_projections(model_dir, monkeypatch):
    """Under LoRA only the adapters train: the frozen embeddings, norms and head (tied: packed from
    the embeddings) keep the copy's tensors as they are; every adapted projection is re-packed. A
    copy that reloaded every tensor after each step spent most of a refresh on the embeddings."""
    engine = _engine(model_dir, lora=True)
    copy = engine.raw.generation_copy
    versions = {name: p._version for name, p in copy.model.state_dict(keep_vars=True).items()}
    from polyrl_torch.generation_weights import PackedLinear

    packed = dict(copy.packed)
    packs: list[object] = []  # a re-pack may write in place (the decode kernel's panels): watch the calls
    original = PackedLinear.pack
    monkeypatch.setattr(PackedLinear, "pack", lambda self, weight: (packs.append(self), original(self, weight))[1])
    _train(engine, seed=0)
    engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=2, seed=0))
    reloaded = sorted(n for n, p in copy.model.state_dict(keep_vars=True).items() if p._version != versions[n])
    assert reloaded == [], f"frozen tensors loaded again after a LoRA step: {reloaded[:3]}"
    repacked = {name for name, module in packed.items() if any(module is called for called in packs)}
    assert repacked == {name for name in packed if _adapted(name)}
    assert "lm_head.weight" in packed and "lm_head.weight" not in repacked


def test_writes_outside_the_optimizer_are_seen(model_dir):
    """A frozen tensor written in place (under no_grad) or given a new storage, and an adapter's
    scale changed, between steps: the refreshed copy takes each of them."""
    engine = _engine(model_dir, lora=True)
    _train(engine, seed=0)
    _assert_as_fresh(engine)
    lm = engine.raw.causal_lm
    with torch.no_grad():
        lm.get_input_embeddings().weight.mul_(0.5)  # in place: its version counter moves
        lm.model.norm.weight.add_(0.25)
    layer = lm.model.layers[0].mlp.down_proj
    layer.base_layer.weight.data = layer.base_layer.weight.data * 2  # a new storage: its address moves
    _assert_as_fresh(engine)
    from peft.tuners.lora import LoraLayer

    for module in lm.modules():
        if isinstance(module, LoraLayer):
            module.set_scale("default", 0.5)  # peft: scaling = 0.5 * alpha / r, no tensor written
    _assert_as_fresh(engine)


def test_imported_weights_refresh_every_tensor(model_dir):
    """``import_weights`` replaces the weights wholesale (LoRA: base written, adapters reset): the
    copy then holds exactly the imported model."""
    engine = _engine(model_dir, lora=True)
    other = _engine(model_dir, lora=False)
    _train(other, seed=1)
    _train(engine, seed=0)
    engine.import_weights(other.export_weights())
    _assert_as_fresh(engine)
    exported = other.export_weights()
    copy = engine.raw.generation_copy.model.state_dict()
    assert torch.equal(copy["model.embed_tokens.weight"], torch.as_tensor(exported["model.embed_tokens.weight"]))
