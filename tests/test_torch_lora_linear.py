"""polyrl_torch.lora_linear against peft's own LoRA ``Linear`` forward: same outputs and gradients
(any scale, with a bias, in float32 and under bfloat16 autocast), peft's path kept wherever the
layer is not plain LoRA (adapters disabled for the reference policy, dropout, merged), and a LoRA
engine's training step equal to the one through peft's layers."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from autograd_util import node_names  # noqa: E402
from polyrl_torch.lora_linear import FUSED_MARK, fuse_lora_layers  # noqa: E402

FUSED_NODE = "_LoraLinearBackward"


class _Proj(torch.nn.Module):
    def __init__(self, d_in: int, d_out: int, bias: bool) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(d_in, d_out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _pair(rank: int = 4, alpha: float = 3.0, dropout: float = 0.0, bias: bool = True,
          dtype: torch.dtype = torch.float64):
    """A peft model with non-zero adapters and its fused twin (same tensors' values)."""
    torch.manual_seed(0)
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=["proj"])
    theirs = peft.get_peft_model(_Proj(12, 10, bias), config).to(dtype)
    for p in theirs.parameters():
        if p.requires_grad:  # peft starts B at zero: the adapters would add nothing
            torch.nn.init.normal_(p, std=0.3)
    ours = copy.deepcopy(theirs)
    assert fuse_lora_layers(ours, "default") == 1
    assert fuse_lora_layers(ours, "default") == 0  # installed once
    return ours, theirs


def _run(model, x: torch.Tensor, grad: torch.Tensor):
    x = x.clone().requires_grad_(True)
    out = model(x)
    out.backward(grad)
    adapters = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return out, x.grad, adapters


def _fused_ran(model, x: torch.Tensor) -> bool:
    """Whether ``model(x)``'s autograd graph holds a fused LoRA node."""
    return FUSED_NODE in node_names(model(x))


@pytest.mark.parametrize("alpha", [8.0, 3.0], ids=["power-of-two-scale", "any-scale"])
@pytest.mark.parametrize("bias", [True, False])
def test_outputs_and_gradients_equal_peft(alpha, bias):
    ours, theirs = _pair(alpha=alpha, bias=bias)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    grad = torch.randn(2, 5, 10, dtype=torch.float64)
    out, gx, ga = _run(ours, x, grad)
    ref, ref_gx, ref_ga = _run(theirs, x, grad)
    assert _fused_ran(ours, x) and not _fused_ran(theirs, x)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx, ref_gx, rtol=1e-12, atol=1e-12)
    assert ga.keys() == ref_ga.keys() and len(ga) == 2
    for name in ga:
        torch.testing.assert_close(ga[name], ref_ga[name], rtol=1e-12, atol=1e-12)


def test_an_input_without_gradient_gives_adapter_gradients_only():
    ours, theirs = _pair()
    x = torch.randn(7, 12, dtype=torch.float64)  # a frozen embedding's output: no grad wanted
    grads = []
    for model in (ours, theirs):
        model(x).pow(2).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    for name in grads[1]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-12, atol=1e-12)


def test_peft_keeps_every_case_that_is_not_plain_lora():
    ours, theirs = _pair()
    x = torch.randn(3, 12, dtype=torch.float64, requires_grad=True)
    assert _fused_ran(ours, x)
    base = ours.get_base_model().proj.base_layer
    with ours.disable_adapter():  # the reference policy: the base model alone
        assert not _fused_ran(ours, x)
        torch.testing.assert_close(ours(x), base(x))
    with_dropout, _ = _pair(dropout=0.5)
    assert not _fused_ran(with_dropout, x)  # peft's dropout (random, the user's choice) stays
    ours.merge_adapter()
    try:
        assert not _fused_ran(ours, x)
        torch.testing.assert_close(ours(x), theirs(x))
    finally:
        ours.unmerge_adapter()


def test_bfloat16_autocast_matches_peft_under_autocast():
    ours, theirs = _pair(dtype=torch.float32)
    x = torch.randn(4, 6, 12)
    grad = torch.randn(4, 6, 10)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ours(x)
        ref = theirs(x)
    assert out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    out.float().backward(grad)
    ref.float().backward(grad)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        if p.requires_grad:  # float32 adapter gradients from bfloat16 products, either way
            assert p.grad.dtype == torch.float32
            torch.testing.assert_close(p.grad, q.grad, rtol=5e-2, atol=5e-2, msg=name)


def test_a_lora_engine_trains_through_the_fused_layers_as_through_peft(tiny_model_dir):
    from peft.tuners.lora import Linear as LoraLinear

    from polyrl.algorithms.objective import Objective
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch

    reg = get_registry()

    def engine():
        return Engine(reg, "torch", EngineConfig(model=tiny_model_dir, lora=LoraConfig(rank=4, alpha=12.0),
                                                 optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=None)))

    ours, theirs = engine(), engine()
    layers = [m for m in theirs.raw.model.modules() if type(m) is LoraLinear]
    assert layers and all(hasattr(m.forward, FUSED_MARK) for m in layers)
    for m in layers:  # back to peft's own forward
        del m.forward
    assert not any(hasattr(m.forward, FUSED_MARK) for m in layers)
    chats = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "2+2?"}]]
    seqs = [TokenSequence.of(c) for c in ours.generate(chats, SamplingParams(max_new_tokens=6, n=2, seed=3))]
    batch = TrainBatch(seqs, np.linspace(-1, 1, len(seqs)))
    for _ in range(2):  # the second step runs with non-zero B
        a, b = ours.train_step(batch, Objective()), theirs.train_step(batch, Objective())
        assert a.loss == pytest.approx(b.loss, rel=1e-5, abs=1e-6)
    for x, y in zip(ours.logprobs(seqs, 1.0), theirs.logprobs(seqs, 1.0)):
        np.testing.assert_allclose(x, y, atol=1e-5)
    for x, y in zip(ours.logprobs(seqs, 1.0, reference=True), theirs.logprobs(seqs, 1.0, reference=True)):
        np.testing.assert_allclose(x, y, atol=1e-6)  # the reference (adapters off) is untouched
