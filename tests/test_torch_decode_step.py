"""The sampler's written-out decode step (``polyrl_torch.decode_step``) on a real tiny Llama.

It must compute what transformers' forward computes, bit for bit: the same tokens and the same
log-probs with prompts of different lengths (left padding), sampling filters, greedy decoding and
after the weights change; it must leave every model it does not reproduce to its own forward, and
refuse a non-boolean switch with an error line.
"""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

torch = pytest.importorskip("torch")

import native_builds  # noqa: E402

#: prompts of different token lengths: the batch is left-padded, so the mask matters
PROMPTS = ["hello there", "count to three, then four, five and six", "a"]


def _engine(model_dir: str, lora: bool = False, compute_dtype: str | None = None, **options) -> Engine:
    return Engine(get_registry(), "torch", EngineConfig(
        model=model_dir, threads=1, seed=0, options=options, optimizer=OptimizerConfig(lr=1e-2),
        lora=LoraConfig(rank=4, alpha=8) if lora else None, compute_dtype=compute_dtype))


def _same(a, b) -> bool:
    return all(list(x.completion_ids) == list(y.completion_ids) and list(x.logprobs) == list(y.logprobs)
               for x, y in zip(a, b, strict=True))


def _torch_ops(engine: Engine) -> Engine:
    """``engine`` with its written-out step in torch ops, where polyrl's decode kernel would have its
    elementwise ops in C (``LlamaDecodeStep.native``: to rounding, not bit for bit)."""
    engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=1))  # makes the sampler's copy
    engine.raw.generation_copy.decode_step.native = False
    return engine


@pytest.mark.parametrize(("lora", "compute_dtype", "packed"), [
    (False, None, True), (True, None, True), (False, "bfloat16", True), (True, "bfloat16", False)])
def test_written_out_steps_sample_what_transformers_forward_does(tiny_model_dir, lora, compute_dtype, packed):
    """float32 and bfloat16 copies (mixed precision), packed or plain linear layers; each row with its
    own copy of its prompt's keys and values (a shared copy agrees to rounding only:
    tests/test_torch_shared_prompt_cache.py)."""
    written = _torch_ops(_engine(tiny_model_dir, lora, compute_dtype, packed_generation=packed,
                                 shared_prompt_attention=False))
    plain = _engine(tiny_model_dir, lora, compute_dtype, packed_generation=packed, lean_decode=False)
    samplings = [SamplingParams(max_new_tokens=10, n=2, temperature=0.0),
                 SamplingParams(max_new_tokens=12, n=3, seed=5, temperature=0.8, top_p=0.9, top_k=20),
                 SamplingParams(max_new_tokens=12, n=2, seed=7, repetition_penalty=1.3),
                 SamplingParams(max_new_tokens=16, n=3, seed=9, stop=("e", "o"))]  # rows finish early
    for round_ in range(2):
        for sampling in samplings:
            a, b = written.generate(PROMPTS, sampling), plain.generate(PROMPTS, sampling)
            assert _same(a, b), (round_, sampling)
            if sampling.stop:  # rows left the batch mid-way (the cache's rows re-selected)
                assert len({len(c.completion_ids) for c in a}) > 1, [c.text for c in a]
        for engine in (written, plain):  # the same update on both: the copies must follow it
            seqs = [TokenSequence.of(c) for c in engine.generate(PROMPTS[:2], samplings[1])]
            engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs)).astype(np.float32)), Objective())
    assert written.raw.generation_copy.decode_step is not None
    assert plain.raw.generation_copy.decode_step is None


@pytest.mark.parametrize("native_build", native_builds.params(), indirect=True)
@pytest.mark.parametrize("shared", [True, False])
def test_written_out_steps_with_c_ops_sample_what_torch_ops_do_to_rounding(tiny_model_dir, shared, native_build):
    """Where the copy runs polyrl's decode kernel, the step's norms, rotary embedding, SiLU product
    and a shared prompt's attention run in C (``decode_ops``, ``decode_attention``): the same
    tokens and log-probs as the torch ops to float32 rounding, through rows leaving and an update."""
    native = _engine(tiny_model_dir, decode_kernel="on", shared_prompt_attention=shared)
    torch_ops = _torch_ops(_engine(tiny_model_dir, decode_kernel="on", shared_prompt_attention=shared))
    samplings = [SamplingParams(max_new_tokens=12, n=3, seed=5, temperature=0.8, top_p=0.9, top_k=20),
                 SamplingParams(max_new_tokens=16, n=3, seed=9, stop=("e", "o"))]  # rows finish early
    for round_ in range(2):
        for sampling in samplings:
            a, b = native.generate(PROMPTS, sampling), torch_ops.generate(PROMPTS, sampling)
            assert [list(c.completion_ids) for c in a] == [list(c.completion_ids) for c in b], (round_, sampling)
            gap = max(abs(float(x) - float(y)) for p, q in zip(a, b, strict=True)
                      for x, y in zip(p.logprobs, q.logprobs, strict=True))
            assert 0 < gap < 1e-4, (round_, sampling)  # not the torch ops' bits, but their values
        for engine in (native, torch_ops):
            seqs = [TokenSequence.of(c) for c in engine.generate(PROMPTS[:2], samplings[0])]
            engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs)).astype(np.float32)), Objective())
    assert native.raw.generation_copy.decode_step.native


def test_rotary_table_gives_the_rotary_modules_values(tiny_model_dir):
    from polyrl_torch.decode_step import MIN_TABLE_POSITIONS

    engine = _engine(tiny_model_dir)
    engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=2))
    step = engine.raw.generation_copy.decode_step
    like = torch.zeros(2, engine.raw.generation_copy.model.config.hidden_size)
    for positions in ([0, 7], [MIN_TABLE_POSITIONS - 1, 3], [5, 3 * MIN_TABLE_POSITIONS]):  # the last grows it
        at = torch.tensor(positions)
        cos, sin = step._rotary(at, like)
        want_cos, want_sin = step.inner.rotary_emb(like, position_ids=at[:, None])
        assert torch.equal(cos, want_cos[:, 0]) and torch.equal(sin, want_sin[:, 0])


def _tiny(family: str = "llama", **config):
    from transformers import AutoConfig, AutoModelForCausalLM

    from polyrl_torch.attention import GROUPED_SDPA, register_grouped_sdpa

    register_grouped_sdpa()
    cfg = AutoConfig.for_model(family, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=50, **config)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation=GROUPED_SDPA)


def test_only_models_running_llama_code_get_the_written_out_step():
    from polyrl_torch.decode_step import supports

    assert supports(_tiny())
    assert supports(_tiny(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}))
    assert not supports(_tiny(hidden_act="gelu"))  # the step's MLP is SiLU
    assert not supports(_tiny(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}))
    assert supports(_tiny().to(torch.bfloat16))  # a mixed-precision sampler's copy
    assert not supports(_tiny().to(torch.float16))
    assert not supports(_tiny("qwen2"))  # its attention's forward is not Llama's (sliding window)
    assert not supports(_tiny("mistral"))


def test_lean_decode_switch_must_be_a_boolean(tiny_model_dir):
    with pytest.raises(ConfigError) as err:
        _engine(tiny_model_dir, lean_decode="no")
    assert err.value.field == "backends.options.lean_decode" and "true or false" in str(err.value)


def test_written_out_steps_on_a_widened_bfloat16_cache(tiny_model_dir):
    """Long completions hold a bfloat16 sampler's keys and values in float32 (``FLOAT32_CACHE_FROM_TOKENS``)."""
    from polyrl_torch.generation import FLOAT32_CACHE_FROM_TOKENS

    sampling = SamplingParams(max_new_tokens=FLOAT32_CACHE_FROM_TOKENS + 4, n=2, seed=3, ignore_eos=True)
    written = _engine(tiny_model_dir, compute_dtype="bfloat16")
    plain = _engine(tiny_model_dir, compute_dtype="bfloat16", lean_decode=False)
    a, b = written.generate(PROMPTS[:2], sampling), plain.generate(PROMPTS[:2], sampling)
    assert {len(c.completion_ids) for c in a} == {sampling.max_new_tokens} and _same(a, b)
