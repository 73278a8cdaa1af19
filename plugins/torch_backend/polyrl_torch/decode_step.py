"""One decode step of a Llama-family sampler copy, written out as the tensor ops it runs.

Why: a decode step's tensors are a few rows wide, so besides its matmuls the step's cost is the
work around each small op, and transformers' forward adds to it: every layer's call goes through
keyword plumbing and output records, every forward recomputes the rotary embedding's cosines and
sines and builds a mask, and each one-token row travels as a 3-D view. ``LlamaDecodeStep`` runs
the same ops in the same order on the same modules (tests/test_torch_decode_step.py: the same
tokens and log-probs bit for bit), keeps rows 2-D, looks each position's cosine and sine up in a
table the model's own rotary module filled once, and hands the copy's attention function the
padding mask as the boolean ``[rows, 1, 1, keys]`` that transformers' SDPA mask is for a single
query (``bench/decode_step_ab.py`` measures both ways in one process). Where rows share a prompt
and the copy is float32, the cache may hold that prompt's keys and values once for its group
(``polyrl_torch.shared_prompt_cache``): equal to the per-row attention to rounding, not bit for bit.

Which models: float32 or bfloat16 copies attending with polyrl's grouped SDPA
(``polyrl_torch.attention``, called here as the model's layers would call it), whose inner model,
decoder layers, attention, MLP and norms run transformers' Llama code (compared by bytecode, not by
name, as ``polyrl_torch.rms_norm`` does, so a family that changed any of them keeps its own
forward), with a SiLU MLP and a rotary embedding whose values depend only on the position (not
"dynamic" or "longrope", which rescale with the sequence), and only on a cache of preallocated
layers. Anything else runs the model's own forward.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from polyrl_torch import decode_ops
from polyrl_torch.attention import GROUPED_SDPA, SAMPLER_SDPA, grouped_sdpa, sampler_sdpa
from polyrl_torch.kv_cache import PreallocatedLayer
from polyrl_torch.rms_norm import same_code
from polyrl_torch.shared_prompt_cache import SharedPromptLayer

#: Rotary types whose cosine and sine at a position never change (a table holds them).
FIXED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
#: Positions the rotary table holds at least (it grows when a longer sequence comes).
MIN_TABLE_POSITIONS = 1024


def llama_modeling() -> types.ModuleType | None:
    try:
        from transformers.models.llama import modeling_llama
    except ImportError:  # a transformers without Llama: nothing to match against
        return None
    return modeling_llama


def _runs(module: Any, reference: Any) -> bool:
    """Whether ``module``'s class runs ``reference``'s forward (``rms_norm.same_code``)."""
    code = getattr(getattr(type(module), "forward", None), "__code__", None)
    return code is not None and same_code(code, reference.forward.__code__)


def supports(model: Any) -> bool:
    """Whether ``model`` (a causal LM) is a float32 or bfloat16 Llama-code model attending with
    polyrl's SDPA (``polyrl_torch.attention``), which is what ``LlamaDecodeStep`` reproduces."""
    return getattr(model.config, "_attn_implementation", None) in (GROUPED_SDPA, SAMPLER_SDPA) and runs_llama_code(model)


def runs_llama_code(model: Any) -> bool:
    """Whether ``model`` (a causal LM) is a float32 or bfloat16 model whose every module a decode
    step calls runs transformers' Llama code (SiLU MLP, a rotary embedding fixed per position),
    whatever its attention implementation."""
    llama = llama_modeling()
    inner = getattr(model, "model", None)
    if any(p.dtype not in (torch.float32, torch.bfloat16) for p in model.parameters()):
        return False
    if llama is None or inner is None or not _runs(model, llama.LlamaForCausalLM) or not _runs(inner, llama.LlamaModel):
        return False
    rotary = getattr(inner, "rotary_emb", None)
    if rotary is None or getattr(rotary, "rope_type", None) not in FIXED_ROPE_TYPES:
        return False
    embed = getattr(inner, "embed_tokens", None)
    if (type(embed) is not torch.nn.Embedding or embed.max_norm is not None
            or not _runs(getattr(inner, "norm", None), llama.LlamaRMSNorm)):
        return False
    if getattr(model.config, "hidden_act", None) != "silu":
        return False
    for layer in inner.layers:
        attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if not (_runs(layer, llama.LlamaDecoderLayer) and _runs(attention, llama.LlamaAttention)
                and _runs(mlp, llama.LlamaMLP) and _runs(getattr(layer, "input_layernorm", None), llama.LlamaRMSNorm)
                and _runs(getattr(layer, "post_attention_layernorm", None), llama.LlamaRMSNorm)):
            return False
    return True


def norm_rows(norm: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``norm(hidden)``; in float32 through torch's ``rms_norm``, which computes the same values
    (the same pow, mean, rsqrt and products) with less work around them."""
    weight = norm.weight
    if hidden.dtype == weight.dtype == torch.float32:
        return torch.nn.functional.rms_norm(hidden, weight.shape, weight, norm.variance_epsilon)
    return norm(hidden)


def layer_modules(model: Any) -> list[tuple[Any, ...]]:
    """Per decoder layer of a Llama-code ``model``, the modules one token's step calls, in order:
    input norm, q/k/v/o projections, post-attention norm, gate/up/down projections."""
    return [(layer.input_layernorm, layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
             layer.self_attn.o_proj, layer.post_attention_layernorm, layer.mlp.gate_proj,
             layer.mlp.up_proj, layer.mlp.down_proj)
            for layer in model.model.layers[: model.config.num_hidden_layers]]


class LlamaDecodeStep:
    """``model``'s next-token logits for one new token per row, as its own forward computes them."""

    def __init__(self, model: Any, share_prompts: bool = True) -> None:
        llama = llama_modeling()
        assert llama is not None, "supports() said yes"
        self.model = model
        self.inner = model.model
        #: transformers' own rotary embedding of queries and keys (``unsqueeze_dim=1``: heads)
        self.apply_rotary = llama.apply_rotary_pos_emb
        #: per layer, the modules a step calls, looked up once (module attribute lookups add up)
        self.layers = layer_modules(model)
        #: the norm each layer's output goes through next: the next layer's input norm, the last the model's
        self.norms_after = [layer[0] for layer in self.layers[1:]] + [self.inner.norm]
        attention = self.inner.layers[0].self_attn
        self.head_dim, self.scaling = attention.head_dim, attention.scaling
        #: the copy's attention function (grouped or sampler SDPA) and a layer to hand it: it reads
        #: only the layer's grouping, which every layer shares
        self.attention = sampler_sdpa if model.config._attn_implementation == SAMPLER_SDPA else grouped_sdpa
        self.attention_module = attention
        self.grouped = attention.num_key_value_groups > 1
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None
        #: whether a group's rows may share their prompt's keys and values (``shares_prompts``)
        self.share_prompts = share_prompts
        #: whether the step's norms, rotary embedding, SiLU product (``polyrl_torch.decode_ops``) and a
        #: shared prompt's attention (``polyrl_torch.decode_attention``) run in C: set where the float32
        #: copy's linears run polyrl's decode kernel (the same library); to float32 rounding, not bit for bit
        self.native = False

    def usable(self, cache: Any) -> bool:
        """Whether this step can run on ``cache`` (one preallocated layer per decoder layer)."""
        layers = getattr(cache, "layers", ())
        return len(layers) == len(self.layers) and all(type(layer) is PreallocatedLayer for layer in layers)

    def shares_prompts(self) -> bool:
        """Whether a group's rows may attend one copy of their prompt's keys and values: switched
        on, and a float32 copy (``polyrl_torch.shared_prompt_cache`` attends in float32 only; a
        bfloat16 copy's cache, even widened to float32, goes with bfloat16 queries)."""
        return self.share_prompts and self.inner.embed_tokens.weight.dtype == torch.float32

    def _rotary(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cosine and sine for ``positions`` (``[rows]``), as the rotary module gives them."""
        need = int(positions.max()) + 1
        if self._cos is None or self._cos.shape[0] < need or self._cos.dtype != like.dtype:
            count = max(need, MIN_TABLE_POSITIONS, 2 * (self._cos.shape[0] if self._cos is not None else 0))
            every = torch.arange(count, device=positions.device)[None]
            cos, sin = self.inner.rotary_emb(like, position_ids=every)  # each entry: its position's alone
            self._cos, self._sin = cos[0], sin[0]
        assert self._sin is not None
        return self._cos[positions], self._sin[positions]

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 past_key_values: Any) -> torch.Tensor:
        """Float32 logits ``[rows, vocab]`` for ``input_ids`` ``[rows, 1]`` at ``position_ids``."""
        if self.native and self.inner.embed_tokens.weight.dtype == torch.float32:
            return self._native_step(input_ids, attention_mask, position_ids, past_key_values)
        rows = input_ids.shape[0]
        # [rows, hidden]: one token per row throughout, so no op carries a length-1 axis
        hidden = torch.nn.functional.embedding(input_ids[:, 0], self.inner.embed_tokens.weight)
        cos, sin = self._rotary(position_ids[:, 0], hidden)  # [rows, head_dim]: the heads' axis added by apply_rotary
        seen = attention_mask.bool()[:, None, None, :]  # what transformers' mask says for one query per row
        dim = self.head_dim
        for (norm, q_proj, k_proj, v_proj, o_proj, mlp_norm, gate, up, down), cache_layer in zip(
                self.layers, past_key_values.layers):
            normed = norm_rows(norm, hidden)
            query, key = self.apply_rotary(q_proj(normed).view(rows, -1, dim), k_proj(normed).view(rows, -1, dim),
                                           cos, sin)
            attended = self._cached_attention(cache_layer, query, key, v_proj(normed).view(rows, -1, dim), seen)
            hidden = hidden + o_proj(attended.reshape(rows, -1))
            normed = norm_rows(mlp_norm, hidden)
            hidden = hidden + down(torch.nn.functional.silu(gate(normed)) * up(normed))  # LlamaMLP, SiLU
        hidden = norm_rows(self.inner.norm, hidden)
        return self.model.lm_head(hidden).float()

    def _native_step(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                     past_key_values: Any) -> torch.Tensor:
        """``__call__``'s ops with each norm (and the residual add before it), rotary embedding and SiLU
        product one C call (``decode_ops``), the shared prompt attended in C (``SharedPromptLayer``)."""
        rows = input_ids.shape[0]
        hidden = torch.nn.functional.embedding(input_ids[:, 0], self.inner.embed_tokens.weight)
        cos, sin = self._rotary(position_ids[:, 0], hidden)
        seen = attention_mask.bool()[:, None, None, :]
        dim = self.head_dim
        first = self.layers[0][0]
        normed = decode_ops.add_rms_norm(hidden, None, first.weight, first.variance_epsilon)
        for (_, q_proj, k_proj, v_proj, o_proj, mlp_norm, gate, up, down), cache_layer, after in zip(
                self.layers, past_key_values.layers, self.norms_after):
            query = decode_ops.rotary_(q_proj(normed).view(rows, -1, dim), cos, sin)
            key = decode_ops.rotary_(k_proj(normed).view(rows, -1, dim), cos, sin)
            attended = self._cached_attention(cache_layer, query, key, v_proj(normed).view(rows, -1, dim), seen)
            normed = decode_ops.add_rms_norm(hidden, o_proj(attended.reshape(rows, -1)), mlp_norm.weight,
                                             mlp_norm.variance_epsilon)
            normed = decode_ops.add_rms_norm(hidden, down(decode_ops.silu_mul(gate(normed), up(normed))),
                                             after.weight, after.variance_epsilon)
        return self.model.lm_head(normed).float()

    def _cached_attention(self, cache_layer: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          seen: torch.Tensor) -> torch.Tensor:
        """This step's ``key`` and ``value`` (``[rows, kv_heads, dim]``) written to ``cache_layer``, and
        ``query``'s attention over the row's keys so far: ``rows`` first, then each head's ``dim``
        values in order (its axes as the attention gives them; the caller reshapes to ``[rows, -1]``)."""
        if type(cache_layer) is SharedPromptLayer:  # prompt keys once per group: see its module
            cache_layer.append(key, value)
            return cache_layer.attend(query, self.scaling)
        keys, values = cache_layer.update(key[:, :, None, :], value[:, :, None, :])
        return self._attend(query[:, :, None, :], keys, values, seen)

    def _attend(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                seen: torch.Tensor) -> torch.Tensor:
        """The copy's attention for one query per row. In float32 ``grouped_sdpa`` is this very SDPA
        call (a single query: no matmul branch, no cast) followed by copies the step does not need."""
        if query.dtype == keys.dtype == values.dtype == torch.float32:
            return torch.nn.functional.scaled_dot_product_attention(
                query, keys, values, attn_mask=seen, scale=self.scaling, enable_gqa=self.grouped)
        out, _ = self.attention(self.attention_module, query, keys, values, seen, dropout=0.0, scaling=self.scaling)
        return out

