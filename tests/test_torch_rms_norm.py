"""polyrl_torch.rms_norm: the fused RMSNorm gives the formula's values and gradients (input and
weight), replaces only norms whose forward is transformers' Llama code, leaves every call it does
not cover (bfloat16) to the module's own forward, and a full-parameter engine trains through it
as through transformers' norms."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers.models.gemma.modeling_gemma import GemmaRMSNorm  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRMSNorm  # noqa: E402

from autograd_util import node_names  # noqa: E402
from polyrl_torch.rms_norm import FUSED_MARK, fuse_rms_norms, rms_norm  # noqa: E402


def formula(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _grads(fn, x: torch.Tensor, weight: torch.Tensor, grad: torch.Tensor):
    x, weight = x.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    out = fn(x, weight)
    out.backward(grad)
    return out.detach(), x.grad, weight.grad


@pytest.mark.parametrize("shape", [(7, 12), (2, 5, 33)])
def test_values_and_gradients_are_the_formulas_in_float64(shape):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64) * 3
    weight = torch.randn(shape[-1], generator=gen, dtype=torch.float64)
    grad = torch.randn(*shape, generator=gen, dtype=torch.float64)
    ours = _grads(lambda a, w: rms_norm(a, w, 1e-5), x, weight, grad)
    exact = _grads(lambda a, w: formula(a, w, 1e-5), x, weight, grad)
    for got, want in zip(ours, exact):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_float32_matches_transformers_llama_norm():
    gen = torch.Generator().manual_seed(1)
    theirs = LlamaRMSNorm(48, eps=1e-6)
    torch.nn.init.normal_(theirs.weight, generator=gen)
    ours = copy.deepcopy(theirs)
    assert fuse_rms_norms(ours) == 1 and fuse_rms_norms(ours) == 0  # installed once
    x, grad = torch.randn(3, 9, 48, generator=gen) * 5, torch.randn(3, 9, 48, generator=gen)
    got = _grads(lambda a, w: torch.func.functional_call(ours, {"weight": w}, (a,)), x, theirs.weight.detach(), grad)
    want = _grads(lambda a, w: torch.func.functional_call(theirs, {"weight": w}, (a,)), x, theirs.weight.detach(),
                  grad)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert "_RmsNormBackward" in node_names(ours(x.requires_grad_(True)))


def test_other_norms_and_other_dtypes_keep_their_own_forward():
    gemma = GemmaRMSNorm(16)  # weight enters as (1 + w): another formula, another bytecode
    assert fuse_rms_norms(gemma) == 0 and not hasattr(gemma.forward, FUSED_MARK)

    llama = LlamaRMSNorm(16).to(torch.bfloat16)
    reference = copy.deepcopy(llama)
    assert fuse_rms_norms(llama) == 1
    x = torch.randn(4, 16, dtype=torch.bfloat16, requires_grad=True)
    out = llama(x)
    assert "_RmsNormBackward" not in node_names(out)
    torch.testing.assert_close(out, reference(x), rtol=0, atol=0)  # the module's own forward, bit for bit


def test_autocast_leaves_the_float32_norm_in_float32():
    norm = LlamaRMSNorm(16)
    assert fuse_rms_norms(norm) == 1
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = norm(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, formula(x, norm.weight.detach(), norm.variance_epsilon))


def test_a_full_parameter_engine_trains_through_the_fused_norms_as_through_transformers(tiny_model_dir):
    from polyrl.algorithms.objective import Objective
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

    reg = get_registry()

    def engine():
        return Engine(reg, "torch", EngineConfig(model=tiny_model_dir, optimizer=OptimizerConfig(lr=1e-2)))

    ours, theirs = engine(), engine()
    norms = [m for m in theirs.raw.model.modules() if hasattr(m.forward, FUSED_MARK)]
    layers = theirs.raw.causal_lm.config.num_hidden_layers
    assert len(norms) == 2 * layers + 1  # two per layer and the final one
    for m in norms:  # back to transformers' own forward
        del m.forward
    chats = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "2+2?"}]]
    seqs = [TokenSequence.of(c) for c in ours.generate(chats, SamplingParams(max_new_tokens=6, n=2, seed=3))]
    batch = TrainBatch(seqs, np.linspace(-1, 1, len(seqs)))
    for _ in range(2):  # the second step runs on weights (norm weights included) the first one moved
        a, b = ours.train_step(batch, Objective()), theirs.train_step(batch, Objective())
        assert a.loss == pytest.approx(b.loss, rel=1e-4, abs=1e-6)
        assert a.grad_norm == pytest.approx(b.grad_norm, rel=1e-4)
    for x, y in zip(ours.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(x, y, atol=1e-4)
