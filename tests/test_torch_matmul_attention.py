"""polyrl_torch.attention's matmul path for short calls: same outputs and gradients as torch's SDPA
(grouped heads, padding masks), taken only where it is valid and small, and a model's log-probs and
training step through it equal to the flash kernel's."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import polyrl_torch.attention as attention  # noqa: E402
from polyrl_torch.attention import matmul_attention, matmul_attention_fits  # noqa: E402


def _inputs(batch=3, heads=6, kv_heads=2, queries=5, keys=9, dim=8, dtype=torch.float64):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, queries, dim, generator=gen, dtype=dtype)
    k = torch.randn(batch, kv_heads, keys, dim, generator=gen, dtype=dtype)
    v = torch.randn(batch, kv_heads, keys, dim, generator=gen, dtype=dtype)
    # a padded prompt (keys 2-3 masked) followed by causal completion keys, as in polyrl's tails
    mask = torch.ones(batch, 1, queries, keys, dtype=torch.bool)
    mask[:, :, :, 2:4] = False
    mask[:, :, :, keys - queries:] = torch.tril(torch.ones(queries, queries, dtype=torch.bool))
    return q, k, v, mask


@pytest.mark.parametrize("scaling", [None, 0.3])
def test_outputs_and_gradients_equal_sdpa(scaling):
    q, k, v, mask = _inputs()
    assert matmul_attention_fits(q, k, mask)
    grad = torch.randn(q.shape, dtype=q.dtype, generator=torch.Generator().manual_seed(1))

    def run(fn):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = fn(*leaves)
        out.backward(grad)
        return [out.detach()] + [t.grad for t in leaves]

    ours = run(lambda a, b, c: matmul_attention(a, b, c, mask, scaling))
    theirs = run(lambda a, b, c: torch.nn.functional.scaled_dot_product_attention(
        a, b, c, attn_mask=mask, scale=scaling, enable_gqa=True))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_a_mask_refilled_in_place_or_shared_by_all_rows_gets_its_own_bias():
    """Layers of one forward share a mask, so its bias is made once; a mask object refilled in place
    (or changed under inference mode, where tensors keep no version counter) must not be answered
    with the bias of its old content, and a one-row mask broadcasts over every row."""
    q, k, v, mask = _inputs()

    def sdpa(m):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)

    for context in (torch.no_grad, torch.inference_mode):
        with context():
            held = mask.clone()
            torch.testing.assert_close(matmul_attention(q, k, v, held, None), sdpa(held), rtol=1e-12, atol=1e-12)
            held[:, :, :, 0] = False  # the same object, new content
            assert matmul_attention_fits(q, k, held)
            torch.testing.assert_close(matmul_attention(q, k, v, held, None), sdpa(held), rtol=1e-12, atol=1e-12)
            held[1, 0, 3] = False  # now a query of row 1 sees no key at all
            held[1, 0, 3, 0] = held[1, 0, 3, 1] = held[1, 0, 3, 4:] = False
            assert not matmul_attention_fits(q, k, held)
            one_row = mask[:1].clone()
            torch.testing.assert_close(matmul_attention(q, k, v, one_row, 0.3),
                                       torch.nn.functional.scaled_dot_product_attention(
                                           q, k, v, attn_mask=one_row, scale=0.3, enable_gqa=True),
                                       rtol=1e-12, atol=1e-12)


def test_only_valid_short_calls_fit():
    q, k, v, mask = _inputs()
    assert matmul_attention_fits(q, k, mask)
    assert matmul_attention_fits(q, k, mask[:1])  # one mask for every row broadcasts
    assert not matmul_attention_fits(q, k, None)  # unmasked (causal) calls keep flash's block skipping
    assert not matmul_attention_fits(q, k, torch.zeros(mask.shape))  # an additive float mask
    assert not matmul_attention_fits(q[:, :, :1], k, mask[:, :, :1])  # one query: a decode step
    fully_masked = mask.clone()
    fully_masked[1, 0, 2] = False  # a query that sees no key: flash gives zeros there, softmax would not
    assert not matmul_attention_fits(q, k, fully_masked)
    assert not matmul_attention_fits(q[:, :5], k, mask)  # 5 query heads over 2 key heads
    long_q, long_k, _, long_mask = _inputs(batch=1, heads=1, kv_heads=1, queries=200, keys=200)
    assert not matmul_attention_fits(long_q, long_k, long_mask)  # flash is faster from here on
    wide = _inputs(batch=64, heads=32, kv_heads=8, queries=30, keys=40, dim=2)
    assert not matmul_attention_fits(wide[0], wide[1], wide[3])  # too many scores to keep per layer


def test_a_models_logprobs_and_training_step_equal_flash_attention(tiny_model_dir, monkeypatch):
    from polyrl.algorithms.objective import Objective
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

    reg = get_registry()
    engine = Engine(reg, "torch", EngineConfig(model=tiny_model_dir, optimizer=OptimizerConfig(lr=1e-2)))
    chats = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "what is 2+2?"}]]
    seqs = [TokenSequence.of(c) for c in engine.generate(chats, SamplingParams(max_new_tokens=6, n=3, seed=3))]
    batch = TrainBatch(seqs, np.linspace(-1, 1, len(seqs)))
    state = {k: v.clone() for k, v in engine.raw.model.state_dict().items()}

    calls = []
    real = attention.matmul_attention

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "matmul_attention", counted)
    ours_lp = engine.logprobs(seqs, 1.0)
    ours = engine.train_step(batch, Objective())
    assert calls  # the path ran, in the prompt and completion passes alike

    engine.raw.model.load_state_dict(state)
    engine.raw.optimizer.state.clear()
    monkeypatch.setattr(attention, "matmul_attention_fits", lambda *a: False)
    theirs_lp = engine.logprobs(seqs, 1.0)
    theirs = engine.train_step(batch, Objective())
    for a, b in zip(ours_lp, theirs_lp):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert ours.loss == pytest.approx(theirs.loss, rel=1e-5, abs=1e-6)
    assert ours.grad_norm == pytest.approx(theirs.grad_norm, rel=1e-4)
