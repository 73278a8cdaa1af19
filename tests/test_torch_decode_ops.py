"""A decode step's elementwise ops in C (``polyrl_torch.decode_ops``) against the torch ops they
replace: the rotary embedding bit for bit (transformers' own ``apply_rotary_pos_emb``), RMSNorm after
the residual add and the SiLU-gated product to float32 rounding, at widths that are and are not a
multiple of one vector (16 floats with AVX-512, 8 with AVX2), extreme inputs included; bad tensors are
refused, not misread."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import native_builds  # noqa: E402

#: every test once per build of the C library this CPU runs (AVX-512 machines: the AVX2 build too)
pytestmark = pytest.mark.parametrize("native_build", native_builds.params(), indirect=True)


@pytest.fixture
def ops(native_build):
    from polyrl_torch import decode_ops

    return decode_ops


@pytest.mark.parametrize(("rows", "width"), [(1, 576), (7, 17), (32, 576), (3, 4096), (2, 5)])
@pytest.mark.parametrize("add", [True, False])
def test_add_rms_norm_is_the_residual_add_then_llama_rms_norm(ops, rows, width, add):
    gen = torch.Generator().manual_seed(rows * width)
    hidden = torch.randn(rows, width, generator=gen) * 3
    delta = torch.randn(rows, width, generator=gen) if add else None
    weight = torch.randn(width, generator=gen)
    summed = hidden + delta if add else hidden.clone()
    want = torch.nn.functional.rms_norm(summed.double(), (width,), weight.double(), 1e-5)
    got = ops.add_rms_norm(hidden, delta, weight, 1e-5)
    assert torch.equal(hidden, summed)  # the residual stream updated in place, exactly
    assert (got.double() - want).abs().max().item() < 1e-5 * want.abs().max().item()


def test_rotary_is_transformers_rotary_bit_for_bit(ops):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    gen = torch.Generator().manual_seed(0)
    for rows, q_heads, k_heads, dim in [(5, 9, 3, 64), (1, 4, 4, 128), (3, 2, 1, 2)]:
        query, key = torch.randn(rows, q_heads, dim, generator=gen), torch.randn(rows, k_heads, dim, generator=gen)
        cos, sin = torch.randn(rows, dim, generator=gen), torch.randn(rows, dim, generator=gen)
        want_q, want_k = apply_rotary_pos_emb(query, key, cos, sin, unsqueeze_dim=1)
        assert torch.equal(ops.rotary_(query.clone(), cos, sin), want_q)
        assert torch.equal(ops.rotary_(key.clone(), cos, sin), want_k)


def test_silu_mul_is_silu_of_the_gate_times_up(ops):
    gen = torch.Generator().manual_seed(1)
    gate, up = torch.randn(33, 1537, generator=gen) * 6, torch.randn(33, 1537, generator=gen)
    gate[0, :8] = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 80.0, -80.0, 100.0, -100.0])
    want = torch.nn.functional.silu(gate.double()) * up.double()
    got = ops.silu_mul(gate, up).double()
    large = want.abs() > 1e-30
    assert ((got - want).abs() / want.abs())[large].max().item() < 1e-6
    assert (got - want).abs()[~large].max().item() < 1e-30  # e^-100 and the like: zero or as tiny


def test_bad_tensors_are_refused(ops):
    rows = torch.randn(4, 8)
    with pytest.raises(TypeError):
        ops.silu_mul(rows.double(), rows.double())
    with pytest.raises(TypeError):
        ops.add_rms_norm(rows.t(), None, torch.ones(4), 1e-5)  # not contiguous
    with pytest.raises(ValueError):
        ops.add_rms_norm(rows, None, torch.ones(7), 1e-5)
    with pytest.raises(ValueError):
        ops.rotary_(torch.randn(2, 3, 8), torch.randn(2, 6), torch.randn(2, 6))
