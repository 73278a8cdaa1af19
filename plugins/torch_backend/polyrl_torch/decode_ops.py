"""A decode step's elementwise ops in C (``decode_ops.c``), where the sampler runs polyrl's own decode
kernel (``decode_kernel``: same library, same build, same switch): RMSNorm after the residual add,
the rotary embedding in place, the SiLU-gated product.

Why: at a few rows these ops cost their dispatches, not their arithmetic: one C call replaces the
three to eight torch ops each is written as (``polyrl_torch.decode_step`` calls them). The rotary
embedding is bit for bit transformers'; the norm and SiLU agree to float32 rounding
(tests/test_torch_decode_ops.py).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from polyrl_torch import decode_kernel


@functools.cache
def _functions() -> Any:
    lib = decode_kernel._library()
    pointer, integer = ctypes.c_void_p, ctypes.c_int
    lib.polyrl_add_rms_norm.argtypes = [pointer] * 4 + [integer] * 2 + [ctypes.c_float]
    lib.polyrl_rotary.argtypes = [pointer] * 3 + [integer] * 3
    lib.polyrl_silu_mul.argtypes = [pointer] * 3 + [ctypes.c_long]
    for function in (lib.polyrl_add_rms_norm, lib.polyrl_rotary, lib.polyrl_silu_mul):
        function.restype = None
    return lib


def _checked(*tensors: torch.Tensor) -> None:
    if not all(t.dtype == torch.float32 and t.is_contiguous() and t.device.type == "cpu" for t in tensors):
        raise TypeError("decode_ops takes contiguous float32 CPU tensors")


def add_rms_norm(hidden: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``hidden += delta`` (in place; None: no add), then ``weight * hidden / sqrt(mean(hidden^2) + eps)``
    over the last axis of ``[rows, width]`` ``hidden``: a new tensor."""
    _checked(hidden, weight, *(() if delta is None else (delta,)))
    rows, width = hidden.shape
    if weight.shape != (width,) or (delta is not None and delta.shape != hidden.shape):
        raise ValueError(f"add_rms_norm: weight {tuple(weight.shape)} / delta for rows of {width}")
    out = torch.empty_like(hidden)
    _functions().polyrl_add_rms_norm(hidden.data_ptr(), None if delta is None else delta.data_ptr(), weight.data_ptr(),
                                     out.data_ptr(), rows, width, eps)
    return out


def rotary_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` (``[rows, heads, dim]``) rotated in place as ``x * cos + rotate_half(x) * sin`` with ``cos``
    and ``sin`` ``[rows, dim]`` (transformers' ``apply_rotary_pos_emb`` with ``unsqueeze_dim=1``)."""
    _checked(x, cos, sin)
    rows, heads, dim = x.shape
    if cos.shape != (rows, dim) or sin.shape != (rows, dim) or dim % 2:
        raise ValueError(f"rotary_: cos/sin {tuple(cos.shape)} for heads {tuple(x.shape)}")
    _functions().polyrl_rotary(x.data_ptr(), cos.data_ptr(), sin.data_ptr(), rows, heads, dim)
    return x


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``: a new tensor."""
    _checked(gate, up)
    if gate.shape != up.shape:
        raise ValueError(f"silu_mul: gate {tuple(gate.shape)} and up {tuple(up.shape)}")
    out = torch.empty_like(gate)
    _functions().polyrl_silu_mul(gate.data_ptr(), up.data_ptr(), out.data_ptr(), gate.numel())
    return out
