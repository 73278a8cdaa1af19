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

Why the sampler attends bfloat16 natively on a CPU with AMX: there torch's flash kernel multiplies
bfloat16 blocks with oneDNN's AMX micro-kernels, and its forward (all a sampler runs) is faster in
bfloat16 than widened to float32: measured 2-7x for decode steps and ~1.4x for a prefill on an
Intel Xeon with AMX, while its backward stays slower in bfloat16 there too. So the sampler's copy
registers ``sampler_sdpa`` (``SAMPLER_SDPA``), which keeps bfloat16 where ``native_bf16_attention``
says so and widens elsewhere; training and ``logprobs`` keep ``grouped_sdpa``'s float32 attention,
so log-probs that the trainer compares with each other come from one kernel. The sampler's
log-probs then differ from the trainer's by bfloat16 rounding of the attention as well as of the
matmuls, which the mismatch metrics report and TIS/MIS correct as before.

Why two matmuls and a softmax for short training-size calls: torch's CPU flash kernel works in
blocks sized for long sequences, and at the lengths of a GRPO step's prompt and completion passes
(a few dozen queries over under a hundred keys) its forward + backward took 1.5x as long as
``matmul_attention`` (measured on an Intel Xeon, float32, 1 thread: 23.2 vs 16.3 ms a layer for
32 rows of 31 completion tokens after a 46-token prompt, 6.5 vs 4.1 ms for 8 masked prompts of
46). Materialising the scores costs memory that flash avoids, and flash wins from ~250 queries
on, so ``matmul_attention_fits`` takes only calls whose scores are small. The scale and the mask
go into the first matmul (``baddbmm``, its bias made once per forward for all layers): scaling
and masking the scores in place afterwards made autograd copy them in backward (21.6 ms a layer
above; ``bench/step_pieces_ab.py``). Unmasked causal calls (prompts of one length) stay with
flash: same function, but routed here they changed the demo's float roundings and, through
sampling, its held-out results (seed 4: 95.0 -> 40.0 %).

Why eager for some families: SDPA has no soft-cap of the attention scores, and transformers' SDPA
attention silently ignores a family's ``attn_logit_softcapping`` (Gemma 2: log-probs 0.7 nats off
the model's on a tiny model), so such models run transformers' eager attention (``needs_eager_attention``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

#: Floating dtypes attended in float32 on the CPU.
SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def grouped_sdpa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, native_bf16: bool = False,
                 **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa_attention_forward`` (same arguments, same result) without ``repeat_kv``,
    computed in float32 when any input is a 16-bit float (else in their own dtype; ``native_bf16``:
    bfloat16 inputs stay bfloat16); the output ``[batch, queries, heads, dim]`` in ``query``'s dtype."""
    out_dtype = query.dtype
    native = native_bf16 and query.dtype == key.dtype == value.dtype == torch.bfloat16
    dtype = torch.bfloat16 if native else attention_dtype(query.dtype, key.dtype)
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.to(dtype)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if (not native and not dropout and attention_mask is not None
            and matmul_attention_fits(query, key, attention_mask)):
        with torch.autocast(query.device.type, enabled=False):
            out = matmul_attention(query, key, value, attention_mask, scaling)
        return out.transpose(1, 2).contiguous().to(out_dtype), None
    with torch.autocast(query.device.type, enabled=False):  # autocast would cast back to 16 bits
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
            is_causal=bool(query.shape[2] > 1 and attention_mask is None and causal),
            enable_gqa=getattr(module, "num_key_value_groups", 1) > 1)
    return out.transpose(1, 2).contiguous().to(out_dtype), None


#: Attention scores (queries x keys x heads x rows) of one call up to which ``matmul_attention`` runs:
#: under autograd every layer keeps its probabilities (4 bytes each in float32) for backward.
MATMUL_ATTENTION_MAX_SCORES = 1 << 21
#: Queries x keys of one head up to which ``matmul_attention`` runs (flash is faster beyond).
MATMUL_ATTENTION_MAX_PAIRS = 1 << 15


def matmul_attention_fits(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether a call is short enough for ``matmul_attention`` (module docstring) and has what it
    needs: several queries, a boolean mask ``[batch or 1, 1, queries, keys]`` under which every query
    sees at least one key (flash's output for a fully masked row is zeros, a softmax's is not),
    query heads a multiple of key heads."""
    batch, heads, queries, _ = query.shape
    keys = key.shape[2]
    if (mask is None or mask.dtype != torch.bool or queries < 2 or heads % key.shape[1]
            or queries * keys > MATMUL_ATTENTION_MAX_PAIRS or batch * heads * queries * keys > MATMUL_ATTENTION_MAX_SCORES
            or mask.dim() != 4 or mask.shape[1:] != (1, queries, keys) or mask.shape[0] not in (1, batch)):
        return False
    return _every_query_sees_a_key(mask)


class _PerMask:
    """A value computed from the last attention mask seen, reused while a mask of the same content
    comes back: every layer of a forward gets the same mask, so its checks and its additive bias are
    made once per forward instead of once per layer. Compared by content (a copy is kept), not by
    identity or version counter: inference tensors have none, and a caller may refill a mask."""

    def __init__(self) -> None:
        #: (copy of the mask, key, value), replaced as one object: a thread reading it never sees
        #: one mask's copy with another's value
        self._entry: tuple[torch.Tensor, tuple[Any, ...], Any] | None = None

    def get(self, mask: torch.Tensor, key: tuple[Any, ...], make: Any) -> Any:
        # values made under inference mode are inference tensors: kept apart from autograd's
        key = (mask.shape, mask.dtype, mask.device, torch.is_inference_mode_enabled(), *key)
        entry = self._entry
        if entry is not None and entry[1] == key and torch.equal(entry[0], mask):
            return entry[2]
        value = make()
        self._entry = (mask.clone(), key, value)
        return value


_seen_checks = _PerMask()
_biases = _PerMask()


def _every_query_sees_a_key(mask: torch.Tensor) -> bool:
    return bool(_seen_checks.get(mask, (), lambda: bool(mask.any(-1).all())))


def _additive_bias(mask: torch.Tensor, kv_heads: int, group: int, dtype: torch.dtype) -> torch.Tensor:
    """``mask [B or 1, 1, T, S]`` as ``matmul_attention``'s additive scores bias: 0 where a key is
    seen, the dtype's lowest value where not, laid out ``[B * kv_heads or 1, group * T, S]`` like
    the stacked scores (a mask shared by all rows stays one row: the bias broadcasts)."""
    def make() -> torch.Tensor:
        rows, _, queries, keys = mask.shape
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)
        heads = kv_heads if rows > 1 else 1
        return bias.view(rows, 1, 1, queries, keys).expand(rows, heads, group, queries, keys).reshape(
            rows * heads, group * queries, keys)
    return _biases.get(mask, (kv_heads, group, dtype), make)


def matmul_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                     scaling: float | None) -> torch.Tensor:
    """``softmax(q k^T * scale + mask) v`` for ``query [B, H, T, D]`` and grouped ``key``/``value``
    ``[B, Hk, S, D]`` (query head h reads key head h // (H / Hk), as ``repeat_kv`` would), boolean
    ``mask``; the output ``[B, H, T, D]``. Each key head's query heads are stacked into one matmul,
    so keys and values are never copied per query head; the scale and the mask's bias go into that
    matmul (``baddbmm``), so no pass rewrites the scores in place, which autograd would answer with
    copies of them in backward."""
    batch, heads, queries, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5
    stacked = query.reshape(batch * kv_heads, group * queries, dim)
    bias = _additive_bias(mask, kv_heads, group, query.dtype)
    scores = torch.baddbmm(bias, stacked, key.reshape(batch * kv_heads, keys, dim).transpose(1, 2), alpha=scale)
    probs = torch.softmax(scores, dim=-1)
    out = torch.bmm(probs, value.reshape(batch * kv_heads, keys, value.shape[-1]))
    return out.view(batch, heads, queries, value.shape[-1])


def attention_dtype(query: torch.dtype, key: torch.dtype) -> torch.dtype:
    """float32 when either side is a 16-bit float (see the module docstring), else the key's."""
    return torch.float32 if query in SIXTEEN_BIT or key in SIXTEEN_BIT else key


#: oneDNN's ISA caps that keep AMX (``ONEDNN_MAX_CPU_ISA``/``DNNL_MAX_CPU_ISA``): any other cap
#: (e.g. ``AVX2`` or ``AVX512_CORE_BF16``, as the bench's AVX2 runs set) turns AMX off.
AMX_ISA_CAPS = ("ALL", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16")


@functools.cache
def native_bf16_attention() -> bool:
    """Whether this CPU's flash attention runs bfloat16 faster than float32: AMX tiles present and
    not capped away from oneDNN (module docstring). Asked once per process."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    if probe is None or not probe():
        return False
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    return cap is None or cap.strip().upper() in AMX_ISA_CAPS


def sampler_sdpa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """``grouped_sdpa`` for the sampler: bfloat16 attended natively where ``native_bf16_attention``."""
    return grouped_sdpa(module, query, key, value, attention_mask,
                        native_bf16=native_bf16_attention(), **kwargs)


#: The names ``grouped_sdpa`` and ``sampler_sdpa`` are registered under with transformers.
GROUPED_SDPA = "polyrl_grouped_sdpa"
SAMPLER_SDPA = "polyrl_sampler_sdpa"


def register_grouped_sdpa() -> str:
    """Register ``grouped_sdpa`` and ``sampler_sdpa`` (and SDPA's own masks for them: transformers
    builds a model's attention mask by the attention implementation's name); return the first's name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    for name, function in ((GROUPED_SDPA, grouped_sdpa), (SAMPLER_SDPA, sampler_sdpa)):
        AttentionInterface.register(name, function)
        AttentionMaskInterface.register(name, sdpa_mask)
    return GROUPED_SDPA


def sampler_attention(implementation: str) -> str:
    """The attention a sampler's copy of a model runs, given the model's own."""
    return SAMPLER_SDPA if implementation == GROUPED_SDPA else implementation


def attends_bf16_natively(model: Any) -> bool:
    """Whether ``model`` (a sampler's copy) keeps bfloat16 keys and values bfloat16 in attention."""
    return getattr(model.config, "_attn_implementation", None) == SAMPLER_SDPA and native_bf16_attention()


def needs_eager_attention(config: Any) -> bool:
    """Whether the model soft-caps its attention scores (SDPA cannot) and runs SDPA now."""
    softcap = getattr(config, "attn_logit_softcapping", None)
    return bool(softcap) and getattr(config, "_attn_implementation", None) in ("sdpa", GROUPED_SDPA, SAMPLER_SDPA)
