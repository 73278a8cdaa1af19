"""Attention on CPU: torch's SDPA with grouped key/value heads, 16-bit inputs attended in float32.

Why not transformers' own ``sdpa`` attention: with an attention mask (left-padded prompts, shared
prompt caches: polyrl always has one) it expands the keys and values of grouped-query models to one
copy per query head before calling SDPA (``repeat_kv``), because CUDA's fast kernels refuse
``enable_gqa`` with a mask. torch's CPU kernel takes both, so that copy, made in every layer of
every forward (of the whole KV cache at every decode step), is pure cost: measured on SmolLM2 (3
key/value heads for 9 query heads) a decode step's attention ran about 8x faster without it, the
training forward and backward ~10-15 % faster, with the same outputs. The torch backend loads
CPU models with it in place of ``sdpa``.

Why float32 for 16-bit inputs: torch's CPU flash attention is slower in bfloat16 than in float32,
~3x for a decode step's one query row and 2-3x for a short sequence's forward + backward (it is
never faster at the lengths measured, up to 512 tokens), so 16-bit queries, keys and values are
attended in float32 (autocast, which would cast them back, is off for the call) and the output
returns in the query's dtype. A bfloat16 sampler's KV cache stays in bfloat16 for short completions
(widening it at each step costs less than moving twice the bytes) and is held in float32 for long
ones, where widening the whole cache at every step costs more (``polyrl_torch.generation``'s
``FLOAT32_CACHE_FROM_TOKENS``; ``bench/kv_cache_dtype.py``).

Why eager for some families: SDPA has no soft-cap of the attention scores, and transformers' SDPA
attention silently ignores a family's ``attn_logit_softcapping`` (Gemma 2: log-probs 0.7 nats off
the model's on a tiny model), so such models run transformers' eager attention (``needs_eager_attention``).
"""

from __future__ import annotations

from typing import Any

import torch

#: Floating dtypes attended in float32 on the CPU.
SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def grouped_sdpa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward`` (same arguments, same result) without ``repeat_kv``,
    computed in float32 when any input is a 16-bit float (else in their own dtype); the output
    ``[batch, queries, heads, dim]`` in ``query``'s dtype."""
    out_dtype = query.dtype
    dtype = attention_dtype(query.dtype, key.dtype)
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.to(dtype)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    with torch.autocast(query.device.type, enabled=False):  # autocast would cast back to 16 bits
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
            is_causal=bool(query.shape[2] > 1 and attention_mask is None and causal),
            enable_gqa=getattr(module, "num_key_value_groups", 1) > 1)
    return out.transpose(1, 2).contiguous().to(out_dtype), None


def attention_dtype(query: torch.dtype, key: torch.dtype) -> torch.dtype:
    """float32 when either side is a 16-bit float (see the module docstring), else the key's."""
    return torch.float32 if query in SIXTEEN_BIT or key in SIXTEEN_BIT else key


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


def needs_eager_attention(config: Any) -> bool:
    """Whether the model soft-caps its attention scores (SDPA cannot) and runs SDPA now."""
    softcap = getattr(config, "attn_logit_softcapping", None)
    return bool(softcap) and getattr(config, "_attn_implementation", None) in ("sdpa", GROUPED_SDPA)
