"""The shared-prompt attention of a decode step in C (``decode_attention.c``), where the sampler runs
polyrl's own decode kernel (``decode_kernel``: same library, same build, same switch).

Why: at one new token per row the attention's arithmetic is small and its torch form
(``SharedPromptLayer.attend``: four batched matmuls and a dozen elementwise ops a layer) costs its
dispatches; one C call a layer reads each row's keys once for all its query heads. It computes the
same softmax attention to float32 rounding (tests/test_torch_decode_attention.py), not bit for bit.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from polyrl_torch import decode_kernel

#: The widest head the C code keeps in registers (16 vectors of 16 floats with AVX-512, 32 of 8 with AVX2).
MAX_HEAD_DIM = 256


def fits(head_dim: int, dtype: torch.dtype) -> bool:
    """Whether the C attention takes heads of ``head_dim`` in ``dtype`` (float32, a multiple of 16 up to 256)."""
    return dtype == torch.float32 and head_dim % 16 == 0 and 0 < head_dim <= MAX_HEAD_DIM


@functools.cache
def _function() -> Any:
    function = decode_kernel._library().polyrl_shared_attention
    function.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_int] * 7 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
    function.restype = None
    return function


def shared(query: torch.Tensor, prompt_keys: torch.Tensor, prompt_values: torch.Tensor, hidden: torch.Tensor,
           owner: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, length: int, scale: float,
           scratch: torch.Tensor) -> torch.Tensor:
    """``SharedPromptLayer.attend``'s result: ``query`` ``[rows, heads, d]``; ``prompt_keys``/``values``
    ``[prompts, kv_heads, prompt_len, d]``; ``hidden`` ``[prompts, prompt_len]`` bool (padding);
    ``owner`` ``[rows]`` int64; ``keys``/``values`` ``[rows, kv_heads, capacity, d]``, ``length``
    written; ``scratch``: at least ``heads // kv_heads * (prompt_len + length)`` float32."""
    rows, heads, dim = query.shape
    prompts, kv_heads, prompt_len, _ = prompt_keys.shape
    group = heads // kv_heads
    tensors = (query, prompt_keys, prompt_values, hidden, owner, keys, values, scratch)
    if not all(t.is_contiguous() for t in tensors) or scratch.numel() < group * (prompt_len + length):
        raise ValueError("decode_attention.shared: contiguous tensors and a large enough scratch")
    out = torch.empty_like(query)
    _function()(query.data_ptr(), prompt_keys.data_ptr(), prompt_values.data_ptr(), hidden.data_ptr(),
                owner.data_ptr(), keys.data_ptr(), values.data_ptr(), rows, kv_heads, group, dim, prompt_len,
                keys.shape[2], length, scale, scratch.data_ptr(), out.data_ptr())
    return out
