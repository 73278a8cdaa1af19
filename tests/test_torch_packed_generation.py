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
    from polyrl_torch.generation_weights import PackedLinear, packing_available

    dt = getattr(torch, dtype)
    if not packing_available(torch.device("cpu"), dt):
        pytest.skip(f"no oneDNN weight packing for {dtype} here (torch build, or no bfloat16 path on this CPU)")
    gen = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(24, 40, bias=bias, dtype=dt)
    packed = PackedLinear(linear)
    packed.pack(linear.weight.float())  # any dtype in: rounded to the layer's
    for x in (torch.randn(3, 24, generator=gen), torch.randn(2, 5, 24, generator=gen)[:, -1:, :]):  # last: strided
        x = x.to(dt)
        tol = 1e-5 if dt == torch.float32 else 2e-2
        torch.testing.assert_close(packed(x), linear(x), rtol=tol, atol=tol)


def _kernel_options(kernel: str) -> dict[str, str]:
    """``backends.options`` asking for polyrl's decode kernel ("on") or oneDNN's packed weights ("off");
    a skip naming why where the kernel cannot run."""
    from polyrl_torch import decode_kernel

    if kernel == "on" and (reason := decode_kernel.unavailable_reason()):
        pytest.skip(f"polyrl's decode kernel cannot run here: {reason}")
    return {"decode_kernel": kernel}


@pytest.mark.parametrize("kernel", ["off", "on"])
def test_packed_sampler_matches_the_plain_one(tiny_model_dir, kernel):
    """oneDNN's packed weights, or the panels of polyrl's own decode kernel."""
    packed = _engine(tiny_model_dir, options=_kernel_options(kernel))
    plain = _engine(tiny_model_dir, options={"packed_generation": False})
    for sampling in (SamplingParams(max_new_tokens=12, n=2, temperature=0.0),
                     SamplingParams(max_new_tokens=12, n=3, seed=5, temperature=1.0, top_p=0.9)):
        a, b = packed.generate(PROMPTS, sampling), plain.generate(PROMPTS, sampling)
        assert [list(c.completion_ids) for c in a] == [list(c.completion_ids) for c in b]
        assert _gap([c.logprobs for c in a], [c.logprobs for c in b]) < FP32_LOGP_TOL
    from polyrl_torch.generation_weights import PackedLinear

    assert plain.raw.generation_copy is None
    layers = [m for m in packed.raw.generation_copy.model.modules() if isinstance(m, PackedLinear)]
    assert layers and not any(type(m) is torch.nn.Linear for m in packed.raw.generation_copy.model.modules())
    assert {m.kernel for m in layers} == {kernel == "on"}


@pytest.mark.parametrize("kernel", ["off", "on"])
@pytest.mark.parametrize("lora", [False, True])
def test_packed_copy_follows_train_steps(tiny_model_dir, lora, kernel):
    """After each update the sampler's own log-probs equal the trainer's for its new weights
    (LoRA folded into the packed copy, or the decode kernel's panels re-made from them), so the
    policy that samples is the one trained."""
    engine = _engine(tiny_model_dir, lora=LoraConfig(rank=4, alpha=8) if lora else None,
                     options=_kernel_options(kernel))
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


def test_bfloat16_sampling_runs_on_any_cpu_packed_only_where_onednn_has_a_bfloat16_path(tiny_model_dir):
    """compute_dtype bfloat16 samples on every CPU: its copy packs the weights only where oneDNN has
    a bfloat16 path (AVX-512 BW/VL/DQ or AVX-NE-CONVERT); on an AVX2-only CPU packing raised, and
    the first generate failed with a PluginError."""
    from polyrl_torch.generation_weights import PackedLinear

    engine = _engine(tiny_model_dir, compute_dtype="bfloat16")
    completions = engine.generate(PROMPTS, SamplingParams(max_new_tokens=6, n=2, seed=3, temperature=1.0))
    assert [len(c.completion_ids) for c in completions] and all(np.isfinite(c.logprobs).all() for c in completions)
    packed = any(isinstance(m, PackedLinear) for m in engine.raw.generation_copy.model.modules())
    assert packed == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
