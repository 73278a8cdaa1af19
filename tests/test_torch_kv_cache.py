"""The torch sampler's preallocated KV cache and two-level inverse CDF change speed, not results.

Both are checked against what they replace on the same inputs: transformers' ``DynamicLayer``
(cat per step) must give bitwise the same tokens and log-probs, including rows that finish early
and are dropped from the batch (with per-row caches: a group sharing its prompt's keys and values
agrees to rounding only, tests/test_torch_shared_prompt_cache.py); the two-level draw must pick the same token as a flat float64
cumulative sum wherever the draw is not within rounding of a boundary.
"""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams, TokenSequence

torch = pytest.importorskip("torch")

CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "user", "content": "Name a colour, please, and say why."}],
]


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> Engine:
    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="generate", seed=0,
                                                          options={"shared_prompt_attention": False}))
    engine.generate(CHATS[:1], SamplingParams(max_new_tokens=1))  # makes the sampler's copy
    copy = engine.raw.generation_copy
    if copy is not None and copy.decode_step is not None:  # its step in torch ops: bit for bit
        copy.decode_step.native = False  # (polyrl's C ops agree to rounding: tests/test_torch_decode_step.py)
    return engine


def _generate(engine: Engine, sampling: SamplingParams, preallocated: bool, monkeypatch) -> list:
    import polyrl_torch.generation as generation

    if not preallocated:
        monkeypatch.setattr(generation, "preallocate", lambda cache, capacity, widen_16bit=False: cache)
    out = engine.generate(CHATS, sampling)
    monkeypatch.undo()
    return out


def _engine_on_cuda(engine: Engine) -> bool:
    return engine.raw.device.type == "cuda"


def _assert_same_logprobs(fast: np.ndarray, slow: np.ndarray, on_cuda: bool) -> None:
    """Bitwise on the CPU. On CUDA the attention kernel picked for a preallocated cache (a longer,
    masked key length) adds in another order than the one for a cache grown by cat, so a log-prob
    may differ in its last bit (seen on an H200: 1 ulp, 4.8e-7 at -6.4): at most 2 ulps there."""
    if not on_cuda:
        np.testing.assert_array_equal(fast, slow)
        return
    ulps = np.abs(fast - slow) / np.spacing(np.abs(slow).astype(np.float32))
    assert ulps.max() <= 2, f"log-probs differ by {ulps.max():.0f} ulps (at most 2 on CUDA)"


@pytest.mark.parametrize("sampling", [
    SamplingParams(max_new_tokens=24, n=3, seed=5),
    SamplingParams(max_new_tokens=24, n=2, seed=1, stop=("e",)),  # rows finish early and are dropped
    SamplingParams(max_new_tokens=16, n=2, temperature=0.0),
    SamplingParams(max_new_tokens=16, n=2, seed=2, top_p=0.7, repetition_penalty=1.3),
])
def test_preallocated_cache_gives_the_same_samples(engine, sampling, monkeypatch):
    fast = _generate(engine, sampling, True, monkeypatch)
    slow = _generate(engine, sampling, False, monkeypatch)
    assert [c.completion_ids.tolist() for c in fast] == [c.completion_ids.tolist() for c in slow]
    for a, b in zip(fast, slow):
        _assert_same_logprobs(a.logprobs, b.logprobs, _engine_on_cuda(engine))
    if sampling.stop:
        assert len({len(c.completion_ids) for c in fast}) > 1, "no row finished early: the drop path was not run"


def test_layer_grows_past_its_capacity_and_selects_rows():
    from polyrl_torch.kv_cache import PreallocatedLayer

    layer = PreallocatedLayer(capacity=3)
    keys = torch.arange(2 * 1 * 2 * 4, dtype=torch.float32).view(2, 1, 2, 4)
    layer.update(keys, keys + 100)
    more = torch.full((2, 1, 3, 4), -1.0)
    k, v = layer.update(more, more)  # 5 positions > capacity 3: grows, keeps what was written
    assert k.shape == (2, 1, 5, 4) and layer.get_seq_length() == 5
    assert torch.equal(k[:, :, :2], keys) and torch.equal(v[:, :, :2], keys + 100)
    layer.batch_select_indices(torch.tensor([1, 1, 0]))
    assert layer.keys.shape == (3, 1, 5, 4)
    assert torch.equal(layer.keys[0], k[1]) and torch.equal(layer.keys[2], k[0])
    layer.crop(4)
    assert layer.get_seq_length() == 4 and layer.keys.shape[-2] == 4


@pytest.mark.parametrize("from_logprobs", [False, True])
@pytest.mark.parametrize("vocab", [257, 1000, 49152])
def test_two_level_draw_matches_a_flat_float64_cdf(vocab, from_logprobs):
    """``from_logprobs``: the probabilities as the sampler takes them when nothing is filtered (the
    exp of the log-probs it computes anyway); 49152 is a whole number of blocks (no padded copy)."""
    from polyrl_torch.generation import sample_probs

    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(64, vocab, generator=gen) * 4
    logits[:, ::7] = float("-inf")  # excluded tokens, including at block edges
    probs = torch.log_softmax(logits, dim=-1).exp() if from_logprobs else torch.softmax(logits, dim=-1)
    draws = torch.rand(64, generator=gen, dtype=torch.float64)
    cdf = probs.double().cumsum(dim=-1)
    flat = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None], right=True)[:, 0]
    picked = sample_probs(probs, draws)
    assert bool((probs.gather(-1, picked[:, None]) > 0).all())
    # away from a boundary (the two sums round differently by ~1e-7) both pick the same token
    margin = (draws * cdf[:, -1] - cdf.gather(-1, (flat - 1).clamp(min=0)[:, None])[:, 0]).abs()
    clear = margin > 1e-6
    assert clear.sum() > 50
    assert torch.equal(picked[clear], flat[clear])


def test_grouped_sdpa_equals_transformers_sdpa_with_a_mask():
    """Grouped-query attention with a padding mask: the same output as transformers' SDPA (which
    copies the keys and values per query head), for a decode step and for a prefill."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from polyrl_torch.attention import grouped_sdpa

    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 3
    gen = torch.Generator().manual_seed(0)
    for queries in (1, 5):
        query = torch.randn(2, 6, queries, 8, generator=gen)
        key, value = torch.randn(2, 2, 7, 8, generator=gen), torch.randn(2, 2, 7, 8, generator=gen)
        mask = torch.ones(2, 1, queries, 7, dtype=torch.bool).tril(diagonal=7 - queries)
        mask[0, :, :, :2] = False  # row 0 left-padded
        out, _ = grouped_sdpa(module, query, key, value, mask, scaling=0.3)
        expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
        assert out.shape == (2, queries, 6, 8)
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_bf16_query_against_a_float32_cache_attends_in_float32():
    """A bfloat16 query against float32 keys: float32 attention of the same inputs, the output
    back in bfloat16; float32 inputs are attended in their own dtype."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from polyrl_torch.attention import grouped_sdpa

    module = torch.nn.Module()
    module.is_causal = True
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 1, 8, generator=gen).bfloat16()
    key, value = torch.randn(2, 4, 5, 8, generator=gen), torch.randn(2, 4, 5, 8, generator=gen)
    out, _ = grouped_sdpa(module, query, key, value, None)
    expected, _ = sdpa_attention_forward(module, query.float(), key, value, None)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, expected.to(torch.bfloat16))
    same, _ = grouped_sdpa(module, query.float(), key, value, None)
    assert torch.equal(same, expected)


def test_bf16_training_attention_runs_in_float32_even_under_autocast():
    """Autocast hands attention bfloat16 queries, keys and values; torch's CPU flash attention is
    2-3x slower in bfloat16 at training lengths, so they are attended in float32 (autocast off for
    the call: it would cast them back), the output and the gradients in bfloat16."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from polyrl_torch.attention import grouped_sdpa

    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 3
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(2, 6, 5, 8, generator=gen).bfloat16().requires_grad_()
    key = torch.randn(2, 2, 5, 8, generator=gen).bfloat16().requires_grad_()
    value = torch.randn(2, 2, 5, 8, generator=gen).bfloat16().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = grouped_sdpa(module, query, key, value, None)
        in_bf16, _ = sdpa_attention_forward(module, query, key, value, None)
    expected, _ = sdpa_attention_forward(module, query.float(), key.float(), value.float(), None)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, expected.to(torch.bfloat16))
    assert not torch.equal(in_bf16, out)  # what autocast alone would have computed differs
    out.float().square().sum().backward()
    assert query.grad is not None and key.grad is not None and value.grad is not None
    assert query.grad.dtype == key.grad.dtype == value.grad.dtype == torch.bfloat16


def _cache_dtypes(monkeypatch) -> list:
    """The dtype of every preallocated KV-cache layer made from now on (the test's monkeypatch undoes it)."""
    import polyrl_torch.kv_cache as kv_cache

    made: list[torch.dtype] = []
    init = kv_cache.PreallocatedLayer.lazy_initialization

    def spy(self, keys, values):
        init(self, keys, values)
        made.append(self._keys.dtype)

    monkeypatch.setattr(kv_cache.PreallocatedLayer, "lazy_initialization", spy)
    return made


def test_a_bfloat16_samplers_float32_cache_gives_the_same_samples(tiny_model_dir, monkeypatch):
    """Long runs hold a 16-bit sampler's cache in float32 (attention widens it anyway): the values
    are the same, so tokens and log-probs must be bitwise those of the 16-bit cache. (A CPU that
    attends bfloat16 natively never widens: that is the next tests'.)"""
    import polyrl_torch.attention as attention
    import polyrl_torch.generation as generation

    monkeypatch.setattr(attention, "native_bf16_attention", lambda: False)
    # the widening is a CPU policy (generation.widens_cache): a GPU attends its 16-bit cache as it is
    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="generate", seed=0,
                                                          compute_dtype="bfloat16", device="cpu"))
    made = _cache_dtypes(monkeypatch)
    sampling = SamplingParams(max_new_tokens=20, n=2, seed=3, stop=("e",))
    runs = {}
    for widen in (False, True):
        monkeypatch.setattr(generation, "FLOAT32_CACHE_FROM_TOKENS", 0 if widen else 10**9)
        made.clear()
        runs[widen] = engine.generate(CHATS, sampling)
        assert set(made) == {torch.float32 if widen else torch.bfloat16}
    assert [c.completion_ids.tolist() for c in runs[True]] == [c.completion_ids.tolist() for c in runs[False]]
    for a, b in zip(runs[True], runs[False]):
        np.testing.assert_array_equal(a.logprobs, b.logprobs)


def test_the_sampler_attends_bfloat16_natively_only_where_the_cpu_says_so(monkeypatch):
    """``sampler_sdpa``: on an AMX CPU bfloat16 queries, keys and values go to torch's kernel as
    they are (its bfloat16 forward is the faster one there); elsewhere they are widened to float32
    as in training. float32 inputs are attended as they are either way."""
    import polyrl_torch.attention as attention

    F = torch.nn.functional
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 3
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(2, 6, 1, 8, generator=gen).bfloat16()
    key, value = torch.randn(2, 2, 7, 8, generator=gen).bfloat16(), torch.randn(2, 2, 7, 8, generator=gen).bfloat16()
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[0, :, :, :2] = False
    native = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    widened = F.scaled_dot_product_attention(query.float(), key.float(), value.float(), attn_mask=mask,
                                             enable_gqa=True).transpose(1, 2).to(torch.bfloat16)
    assert not torch.equal(native, widened)  # the two paths are told apart by their rounding
    for amx, expected in ((True, native), (False, widened)):
        monkeypatch.setattr(attention, "native_bf16_attention", lambda amx=amx: amx)
        out, _ = attention.sampler_sdpa(module, query, key, value, mask)
        assert out.dtype == torch.bfloat16
        assert torch.equal(out, expected)
        # training's attention widens whatever the CPU
        trained, _ = attention.grouped_sdpa(module, query, key, value, mask)
        assert torch.equal(trained, widened)
        full, _ = attention.sampler_sdpa(module, query.float(), key.float(), value.float(), mask)
        assert full.dtype == torch.float32


@pytest.mark.parametrize(("amx", "cap", "native"), [
    (False, None, False), (True, None, True), (True, "AVX2", False), (True, "avx512_core_amx", True),
    (True, "AVX512_CORE_BF16", False),
])
def test_native_bfloat16_attention_needs_amx_not_capped_away(monkeypatch, amx, cap, native):
    """AMX tiles present and oneDNN not capped below them (the bench's AVX2 runs cap it)."""
    import polyrl_torch.attention as attention

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    if cap is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    attention.native_bf16_attention.cache_clear()
    try:
        assert attention.native_bf16_attention() is native
    finally:
        attention.native_bf16_attention.cache_clear()


@pytest.mark.parametrize("amx", [True, False])
def test_a_bfloat16_sampler_on_amx_keeps_its_cache_bfloat16_and_training_attention_float32(
        tiny_model_dir, monkeypatch, amx):
    """The sampler's copy runs ``sampler_sdpa``, the trained model ``grouped_sdpa``. Where bfloat16
    is attended natively a long run's cache is not widened (nothing would read it in float32), and
    the sampler's log-probs stay within bfloat16 rounding of the trainer's."""
    import polyrl_torch.attention as attention
    import polyrl_torch.generation as generation

    monkeypatch.setattr(attention, "native_bf16_attention", lambda: amx)
    monkeypatch.setattr(generation, "FLOAT32_CACHE_FROM_TOKENS", 0)  # every run counts as long
    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="train", seed=0,
                                                          compute_dtype="bfloat16", device="cpu"))  # CPU policies
    made = _cache_dtypes(monkeypatch)
    completions = engine.generate(CHATS, SamplingParams(max_new_tokens=12, n=2, seed=3))
    assert set(made) == {torch.bfloat16 if amx else torch.float32}
    assert engine.raw.generation_copy.model.config._attn_implementation == attention.SAMPLER_SDPA
    assert engine.raw.model.config._attn_implementation == attention.GROUPED_SDPA
    scored = engine.logprobs([TokenSequence.of(c) for c in completions], 1.0)
    gap = max(float(np.abs(np.asarray(a) - np.asarray(c.logprobs)).max()) for a, c in zip(scored, completions))
    assert 0 < gap < 0.03
