"""The CPU sampler's packed weights (``polyrl_torch.generation_weights``) on a real tiny Llama.

Packing changes how the matmuls stream weights, not what they compute: the packed sampler must
pick the same tokens as the plain one with log-probs equal to float32 rounding, follow every
weight update (a train step, LoRA folded in), and refuse a non-boolean switch with an error line.
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

PROMPTS = ["hello there", "count to three"]
#: float32 log-probs computed by another matmul kernel (other summation order)
FP32_LOGP_TOL = 1e-4


def _engine(model_dir: str, **kw) -> Engine:
    options = kw.pop("options", {})
    return Engine(get_registry(), "torch", EngineConfig(model=model_dir, threads=1, seed=0, options=options,
                                                        optimizer=OptimizerConfig(lr=1e-2), **kw))


def _gap(a, b) -> float:
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(a, b))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_computes_what_linear_does(dtype, bias):
    from polyrl_torch.generation_weights import packing_available
    from polyrl_torch.packed_linear import PackedLinear

    dt = getattr(torch, dtype)
    if not packing_available(torch.device("cpu"), dt):
        pytest.skip("this torch build has no oneDNN weight packing")
    gen = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(24, 40, bias=bias, dtype=dt)
    packed = PackedLinear(linear)
    packed.pack(linear.weight.float())  # any dtype in: rounded to the layer's
    for x in (torch.randn(3, 24, generator=gen), torch.randn(2, 5, 24, generator=gen)[:, -1:, :]):  # last: strided
        x = x.to(dt)
        tol = 1e-5 if dt == torch.float32 else 2e-2
        torch.testing.assert_close(packed(x), linear(x), rtol=tol, atol=tol)


class _Attention(torch.nn.Module):
    """The shape ``pack_linears`` fuses: three projections of one input, and one it must not."""

    def __init__(self, bias: bool) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.q_proj, self.k_proj, self.v_proj = (torch.nn.Linear(24, out, bias=bias) for out in (32, 8, 8))
        self.o_proj = torch.nn.Linear(32, 24, bias=bias)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=gen)


def _fused_copy(module: torch.nn.Module, **kw):
    import copy

    from polyrl_torch.packed_linear import pack_linears

    packed = copy.deepcopy(module)
    singles, groups = pack_linears(packed, **kw)
    state = dict(module.named_parameters())
    with torch.no_grad():
        for name, layer in singles.items():
            layer.pack(state[name])
        for names, group in groups.items():
            group.pack([state[n] for n in names])
    return packed, singles, groups


@pytest.mark.parametrize("bias", [True, False])
def test_fused_siblings_each_give_their_own_projection_in_any_call_pattern(bias):
    from polyrl_torch.generation_weights import packing_available

    if not packing_available(torch.device("cpu"), torch.float32):
        pytest.skip("this torch build has no oneDNN weight packing")
    plain = _Attention(bias)
    packed, singles, groups = _fused_copy(plain)
    assert list(singles) == ["o_proj.weight"]
    assert list(groups) == [("q_proj.weight", "k_proj.weight", "v_proj.weight")]
    group = groups[("q_proj.weight", "k_proj.weight", "v_proj.weight")]
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(5, 24, generator=gen), torch.randn(2, 3, 24, generator=gen)
    names = ["q_proj", "k_proj", "v_proj"]
    patterns = [[("q_proj", x), ("k_proj", y), ("v_proj", x), ("q_proj", y), ("v_proj", y)],  # inputs mixed
                [("q_proj", x), ("q_proj", x), ("k_proj", x), ("v_proj", x)],  # one sibling twice
                [(n, x) for n in reversed(names)],                        # any order
                [(n, x) for n in names]]                                  # the usual order
    for pattern in patterns:
        for name, inp in pattern:
            out = getattr(packed, name)(inp)
            assert out.is_contiguous()  # as a Linear's: any reshape the family makes works
            torch.testing.assert_close(out, getattr(plain, name)(inp), rtol=1e-5, atol=1e-5)
    assert group._input is None and group._outputs is None  # every sibling served: nothing held
    packed.q_proj(x)
    assert group._input is x  # held only until k and v take theirs


def test_siblings_that_differ_or_are_named_unfused_stay_single_layers():
    mixed_bias = _Attention(bias=False)
    mixed_bias.v_proj = torch.nn.Linear(24, 8, bias=True)
    _, singles, groups = _fused_copy(mixed_bias)
    assert not groups and sorted(singles) == ["k_proj.weight", "o_proj.weight", "q_proj.weight", "v_proj.weight"]
    _, singles, groups = _fused_copy(_Attention(bias=False), unfused={"k_proj.weight"})
    assert not groups and len(singles) == 4


def test_packed_sampler_matches_the_plain_one(tiny_model_dir):
    packed, plain = _engine(tiny_model_dir), _engine(tiny_model_dir, options={"packed_generation": False})
    for sampling in (SamplingParams(max_new_tokens=12, n=2, temperature=0.0),
                     SamplingParams(max_new_tokens=12, n=3, seed=5, temperature=1.0, top_p=0.9)):
        a, b = packed.generate(PROMPTS, sampling), plain.generate(PROMPTS, sampling)
        assert [list(c.completion_ids) for c in a] == [list(c.completion_ids) for c in b]
        assert _gap([c.logprobs for c in a], [c.logprobs for c in b]) < FP32_LOGP_TOL
    from polyrl_torch.packed_linear import PackedLinear

    assert plain.raw.generation_copy is None
    copy = packed.raw.generation_copy
    layers = [m for m in copy.model.modules() if isinstance(m, PackedLinear)]
    assert layers and not any(type(m) is torch.nn.Linear for m in copy.model.modules())
    layer_count = copy.model.config.num_hidden_layers
    assert sorted(len(names) for names in copy.fused) == [2] * layer_count + [3] * layer_count  # gate/up, q/k/v


@pytest.mark.parametrize("lora", [False, True])
def test_packed_copy_follows_train_steps(tiny_model_dir, lora):
    """After each update the sampler's own log-probs equal the trainer's for its new weights
    (LoRA folded into the packed copy), so the policy that samples is the one trained."""
    engine = _engine(tiny_model_dir, lora=LoraConfig(rank=4, alpha=8) if lora else None)
    sampling = SamplingParams(max_new_tokens=8, n=2, seed=1, temperature=1.0)
    for _ in range(3):
        completions = engine.generate(PROMPTS, sampling)
        seqs = [TokenSequence.of(c) for c in completions]
        assert _gap(engine.logprobs(seqs, 1.0), [c.logprobs for c in completions]) < FP32_LOGP_TOL
        engine.train_step(TrainBatch(seqs, np.array([1.0, -1.0, 1.0, -1.0], dtype=np.float32)), Objective())


def test_packed_generation_switch_must_be_a_boolean(tiny_model_dir):
    with pytest.raises(ConfigError) as err:
        _engine(tiny_model_dir, options={"packed_generation": "no"})
    assert err.value.field == "backends.options.packed_generation"
    assert "true or false" in str(err.value)
