"""A group's rows attending one shared copy of their prompt's keys and values
(``polyrl_torch.shared_prompt_cache``): the same attention as a per-row cache to float rounding,
through decode steps, rows leaving unevenly, a prompt given twice and a cache outgrowing its
capacity; and in the sampler, the same samples as with per-row caches, log-probs matching the
trainer's, used only where it applies, its switch checked."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

torch = pytest.importorskip("torch")

import native_builds  # noqa: E402
from polyrl_torch.shared_prompt_cache import SharedPromptLayer  # noqa: E402

#: float32 attention computed in two orders of operations differs by a few ulps of its inputs
ATTENTION_ROUNDING = 1e-5
#: log-probs through a whole (tiny) model, the shared cache against per-row copies or the trainer
LOGPROB_ROUNDING = 1e-4
PROMPTS = ["hello there", "count to three, then four, five and six", "a", "hello there"]


def _reference(query, keys, values, seen):
    return torch.nn.functional.scaled_dot_product_attention(
        query[:, :, None], keys, values, attn_mask=seen[:, None, None, :], scale=0.125, enable_gqa=True)[:, :, 0]


@pytest.mark.parametrize("native_build", [pytest.param(None, id="torch"), *native_builds.params()], indirect=True)
@pytest.mark.parametrize(("owner", "kv_heads", "groups", "capacity", "dim", "prompt_len"), [
    ([0, 0, 0, 0, 1, 1, 1, 1], 3, 3, 6, 64, 7),      # two prompts, groups of 4, in order
    ([0, 1, 0, 2, 2, 1, 0], 2, 2, 6, 64, 7),         # a prompt given twice: rows not in prompt order, uneven groups
    ([0, 0, 1, 1], 1, 4, 2, 64, 7),                  # one key/value head; the cache outgrows its capacity
    ([0, 0, 0, 1, 1, 1], 2, 7, 40, 128, 37),         # wider heads, more keys than one vector of scores
    ([0, 0, 1, 1, 1, 1], 4, 1, 4, 16, 1),            # no grouping; a one-token prompt
])
def test_shared_prompt_attention_equals_per_row_attention(owner, kv_heads, groups, capacity, dim, prompt_len,
                                                          native_build):
    """Each step appends a key and value per row and attends; rows leave after step 2 (one prompt's
    last rows among them, so that prompt is dropped) and the rest must still attend correctly; the
    same in torch ops and in C (``native_build``: each build of the C library this CPU runs)."""
    native = native_build is not None
    gen = torch.Generator().manual_seed(len(owner))
    prompts = max(owner) + 1
    prompt_keys = torch.randn(prompts, kv_heads, prompt_len, dim, generator=gen)
    prompt_values = torch.randn(prompts, kv_heads, prompt_len, dim, generator=gen)
    seen = torch.ones(prompts, prompt_len, dtype=torch.bool)
    seen[0, :min(3, prompt_len - 1)] = False  # left padding of the shorter prompt
    prompt_keys[0, :, :min(3, prompt_len - 1)] = 1e3  # hidden: any weight on them would show
    prompt_values[0, :, :min(3, prompt_len - 1)] = 1e3
    rows_owner = torch.tensor(owner)
    layer = SharedPromptLayer(prompt_keys, prompt_values, seen, rows_owner, capacity, native=native)
    assert layer.native == native
    keys, values, row_seen = prompt_keys[rows_owner], prompt_values[rows_owner], seen[rows_owner]
    for step in range(5):
        if step == 2:  # keep the rows that do not belong to the last prompt, and one fewer
            keep = torch.tensor([i for i, o in enumerate(rows_owner.tolist()) if o != prompts - 1][1:])
            layer.batch_select_indices(keep)
            keys, values, row_seen, rows_owner = keys[keep], values[keep], row_seen[keep], rows_owner[keep]
            assert layer.prompt_keys.shape[0] == len(set(rows_owner.tolist()))
        rows = len(rows_owner)
        key, value = (torch.randn(rows, kv_heads, dim, generator=gen) for _ in range(2))
        query = torch.randn(rows, kv_heads * groups, dim, generator=gen) * (4.0 if step == 3 else 1.0)  # peaked
        layer.append(key, value)
        keys, values = torch.cat([keys, key[:, :, None]], 2), torch.cat([values, value[:, :, None]], 2)
        row_seen = torch.cat([row_seen, torch.ones(rows, 1, dtype=torch.bool)], 1)
        got, want = layer.attend(query, 0.125), _reference(query, keys, values, row_seen)
        assert got.shape == want.shape
        assert (got - want).abs().max().item() < ATTENTION_ROUNDING, step
    assert layer.get_seq_length() == prompt_len + 5


@pytest.mark.parametrize("native_build", native_builds.params(), indirect=True)
@pytest.mark.parametrize(("kv_heads", "groups", "dim", "prompt_len"), [(3, 3, 64, 46), (2, 2, 128, 9)])
def test_c_attention_over_long_completions_equals_per_row_attention(kv_heads, groups, dim, prompt_len,
                                                                    native_build):
    """Completions past several vectors of keys: the C code scores whole blocks of keys side by side and
    fetches keys ahead, which the short caches above never reach; checked at and around block edges."""
    gen = torch.Generator().manual_seed(dim)
    owner = torch.tensor([0, 0, 1, 0])
    prompt_keys, prompt_values = (torch.randn(2, kv_heads, prompt_len, dim, generator=gen) for _ in range(2))
    seen = torch.ones(2, prompt_len, dtype=torch.bool)
    seen[1, :2] = False
    layer = SharedPromptLayer(prompt_keys, prompt_values, seen, owner, 70, native=True)
    assert layer.native
    keys, values, row_seen = prompt_keys[owner], prompt_values[owner], seen[owner]
    for step in range(1, 66):
        key, value = (torch.randn(4, kv_heads, dim, generator=gen) for _ in range(2))
        layer.append(key, value)
        keys, values = torch.cat([keys, key[:, :, None]], 2), torch.cat([values, value[:, :, None]], 2)
        row_seen = torch.cat([row_seen, torch.ones(4, 1, dtype=torch.bool)], 1)
        if step % 16 in (0, 1, 7, 8, 9, 15) or step > 60:
            query = torch.randn(4, kv_heads * groups, dim, generator=gen) * 2.0
            got, want = layer.attend(query, 0.125), _reference(query, keys, values, row_seen)
            assert (got - want).abs().max().item() < ATTENTION_ROUNDING, step


def _engine(model_dir: str, **options) -> Engine:
    return Engine(get_registry(), "torch", EngineConfig(
        model=model_dir, threads=1, seed=0, options=options, optimizer=OptimizerConfig(lr=1e-2)))


def _gap(a, b) -> float:
    return max(abs(float(x) - float(y)) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True))


@pytest.fixture
def attends(monkeypatch):
    """How many decode-step attentions went through the shared cache."""
    calls = {"n": 0}
    original = SharedPromptLayer.attend

    def counted(self, query, scale):
        calls["n"] += 1
        return original(self, query, scale)

    monkeypatch.setattr(SharedPromptLayer, "attend", counted)
    return calls


def test_sampler_with_shared_prompts_samples_what_per_row_caches_do(tiny_model_dir, attends):
    shared, per_row = _engine(tiny_model_dir), _engine(tiny_model_dir, shared_prompt_attention=False)
    samplings = [SamplingParams(max_new_tokens=12, n=3, seed=5, temperature=0.8, top_p=0.9, top_k=20),
                 SamplingParams(max_new_tokens=16, n=3, seed=9, stop=("e", "o")),  # rows leave mid-way
                 SamplingParams(max_new_tokens=8, n=1, seed=1)]  # one row each, but a prompt given twice
    for round_ in range(2):
        for sampling in samplings:
            before = attends["n"]
            a, b = shared.generate(PROMPTS, sampling), per_row.generate(PROMPTS, sampling)
            assert attends["n"] > before, sampling  # the shared cache did the attending
            assert [list(c.completion_ids) for c in a] == [list(c.completion_ids) for c in b], (round_, sampling)
            assert _gap([c.logprobs for c in a], [c.logprobs for c in b]) < LOGPROB_ROUNDING
            if sampling.stop:
                assert len({len(c.completion_ids) for c in a}) > 1, [c.text for c in a]
        # the same update on both, then the sampler's log-probs must be the trainer's to rounding
        for engine in (shared, per_row):
            seqs = [TokenSequence.of(c) for c in engine.generate(PROMPTS[:2], samplings[0])]
            engine.train_step(TrainBatch(seqs, np.linspace(-1, 1, len(seqs)).astype(np.float32)), Objective())
        fresh = shared.generate(PROMPTS, samplings[0])
        assert _gap([c.logprobs for c in fresh],
                    shared.logprobs([TokenSequence.of(c) for c in fresh], samplings[0].temperature)) < LOGPROB_ROUNDING


def test_shared_prompts_only_where_rows_share_a_float32_prompt(tiny_model_dir, attends):
    """Distinct prompts with one row each have nothing to share; a bfloat16 copy attends its own way."""
    _engine(tiny_model_dir).generate(PROMPTS[:3], SamplingParams(max_new_tokens=4, n=1, seed=0))
    _engine(tiny_model_dir, shared_prompt_attention=False).generate(PROMPTS, SamplingParams(max_new_tokens=4, n=2))
    Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, threads=1, compute_dtype="bfloat16")).generate(
        PROMPTS, SamplingParams(max_new_tokens=4, n=2, seed=0))
    assert attends["n"] == 0


def test_shared_prompt_switch_must_be_a_boolean(tiny_model_dir):
    with pytest.raises(ConfigError) as err:
        _engine(tiny_model_dir, shared_prompt_attention="yes")
    assert err.value.field == "backends.options.shared_prompt_attention" and "true or false" in str(err.value)
