"""Attention on CPU: torch's SDPA with grouped key/value heads, in the keys' dtype.

Why not transformers' own ``sdpa`` attention: with an attention mask (left-padded prompts, shared
prompt caches: polyrl always has one) it expands the keys and values of grouped-query models to one
copy per query head before calling SDPA (``repeat_kv``), because CUDA's fast kernels refuse
``enable_gqa`` with a mask. torch's CPU kernel takes both, so that copy, made in every layer of
every forward (of the whole KV cache at every decode step), is pure cost: measured on SmolLM2 (3
key/value heads for 9 query heads) a decode step's attention ran about 8x faster without it, the
training forward and backward ~10-15 % faster, with the same outputs. The torch backend loads
CPU models with it in place of ``sdpa``.

Why a cache dtype of its own: torch's CPU flash attention is ~3x slower in bfloat16 than in
float32 for a decode step's one query row, so a bfloat16 sampler keeps its cache in float32 (one
new row converted per step) and attends in float32; the output goes back to the model's dtype.
"""

from __future__ import annotations

from typing import Any

import torch


def grouped_sdpa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward`` (same arguments, same result) without ``repeat_kv``,
    computed in ``key``'s dtype; the output ``[batch, queries, heads, dim]`` in ``query``'s."""
    out_dtype = query.dtype
    if key.dtype != query.dtype:
        query = query.to(key.dtype)
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.to(key.dtype)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=bool(query.shape[2] > 1 and attention_mask is None and causal),
        enable_gqa=getattr(module, "num_key_value_groups", 1) > 1)
    return out.transpose(1, 2).contiguous().to(out_dtype), None


#: The name ``grouped_sdpa`` is registered under with transformers.
GROUPED_SDPA = "polyrl_grouped_sdpa"


def register_grouped_sdpa() -> str:
    """Register ``grouped_sdpa`` (and SDPA's own masks for it: transformers builds a model's
    attention mask by the attention implementation's name) and return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    return GROUPED_SDPA
