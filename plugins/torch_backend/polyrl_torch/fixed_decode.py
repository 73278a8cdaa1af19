"""Decoding with fixed shapes, so that on a GPU one CUDA graph replays each token's whole forward.

Why: on a GPU a small model's decode step is bound by the host, not the device. Each of the few
hundred small kernels of a step is launched from Python, one after another (README "On a GPU":
~15 ms per token for both SmolLM2 shapes on an H200, whose kernels for that step take a small
fraction of it). A CUDA graph captured once replays them all with one launch. A graph fixes every
tensor's address and shape, so this decoder keeps them fixed: no row is dropped (a finished row
keeps decoding and the sampler discards its tokens), keys and values live in buffers of the call's
whole capacity and every row writes its new position into the same slot (the sampler left-pads
prompts to one width), the mask over that capacity gains its column on the device, and token ids,
positions and the slot are device tensors updated in place.

Where: ``backends.options.fixed_shape_decode`` is "auto" (the default: on CUDA, for the models
``usable`` accepts), "on" (any device; without CUDA the same fixed-shape steps run eagerly, which
is how the CPU suite checks them against the row-dropping loop) or "off".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from polyrl.backend_kit.options import choice_option
from polyrl.logs import get_logger
from polyrl_torch.decode_step import layer_modules, llama_modeling, norm_rows, runs_llama_code
from polyrl_torch.kv_cache import PreallocatedLayer

MODES = ("auto", "on", "off")
#: Un-captured steps before capture: lazy initialisation (cuBLAS handles, workspaces) happens
#: there, not inside the graph, as torch's CUDA graph notes ask.
WARMUP_STEPS = 2


def mode(options: Mapping[str, Any]) -> str:
    """``backends.options.fixed_shape_decode``, checked."""
    return choice_option(options, "fixed_shape_decode", "auto", MODES,
                         fix='write "auto" (CUDA graphs on a GPU), "on" (any device) or "off" (the row-dropping loop)')


def wanted(options: Mapping[str, Any], device: torch.device) -> bool:
    """Whether this run decodes with fixed shapes where the model allows it."""
    chosen = mode(options)
    return chosen == "on" or (chosen == "auto" and device.type == "cuda")


def usable(model: Any, cache: Any) -> bool:
    """Whether ``model`` (a causal LM) and ``cache`` (after prefill) fit this decoder: Llama code
    (``decode_step.runs_llama_code``) on one preallocated cache layer per decoder layer."""
    layers = getattr(cache, "layers", ())
    return (runs_llama_code(model) and len(layers) == model.config.num_hidden_layers
            and all(type(layer) is PreallocatedLayer and layer.buffers() is not None for layer in layers))


class FixedShapeDecoder:
    """Next-token logits for every row, one token per row per ``step``, from fixed buffers.

    Built after the prefill, from its per-row cache (each layer's buffers already hold the call's
    capacity), the padded prompts' mask and each row's next position."""

    def __init__(self, model: Any, cache: Any, attention_mask: torch.Tensor, next_positions: torch.Tensor,
                 capture: bool) -> None:
        llama = llama_modeling()
        assert llama is not None, "usable() said yes"
        self.model = model
        self.apply_rotary = llama.apply_rotary_pos_emb
        self.layers = layer_modules(model)
        attention = model.model.layers[0].self_attn
        self.head_dim, self.scaling = attention.head_dim, attention.scaling
        self.groups = attention.num_key_value_groups
        width = attention_mask.shape[1]
        self.buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
        for layer in cache.layers:
            keys, values = layer.buffers()
            # never-written slots are masked out, but a masked score still multiplies its value by
            # zero: garbage there (NaN) would poison the sum
            keys[:, :, width:].zero_()
            values[:, :, width:].zero_()
            self.buffers.append((keys, values))
        rows, capacity = attention_mask.shape[0], self.buffers[0][0].shape[2]
        device = attention_mask.device
        self.rows = rows
        #: ``[rows, 1, 1, capacity]``: the positions each row attends (a query per row, broadcast over heads)
        self.mask = torch.zeros((rows, 1, 1, capacity), dtype=torch.bool, device=device)
        self.mask[:, 0, 0, :width] = attention_mask.bool()
        self.slot = torch.tensor([width], dtype=torch.long, device=device)  # the cache column written next
        self.positions = next_positions.clone()
        self.ids = torch.zeros(rows, dtype=torch.long, device=device)
        # each position's cosine and sine, up to the last one this call can reach
        every = torch.arange(int(self.positions.max()) + capacity - width + 1, device=device)[None]
        embed = model.model.embed_tokens.weight
        cos, sin = model.model.rotary_emb(embed[:1], position_ids=every)
        self.cos, self.sin = cos[0], sin[0]
        self.graph: Any = None
        self.logits: torch.Tensor | None = None
        if capture:
            self._capture()

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Float32 logits ``[rows, vocab]`` after each row's ``tokens`` (``[rows]``); the returned
        tensor is overwritten by the next step."""
        self.ids.copy_(tokens)
        if self.graph is not None:
            self.graph.replay()
            assert self.logits is not None
            logits = self.logits
        else:
            logits = self._forward()
        self.slot.add_(1)
        self.positions.add_(1)
        return logits

    def _forward(self) -> torch.Tensor:
        """One token per row through the model, reading and writing only the fixed buffers."""
        rows, dim = self.rows, self.head_dim
        inner = self.model.model
        hidden = torch.nn.functional.embedding(self.ids, inner.embed_tokens.weight)
        cos, sin = self.cos.index_select(0, self.positions), self.sin.index_select(0, self.positions)
        self.mask.index_fill_(-1, self.slot, True)  # each row attends its own new position too
        for (norm, q_proj, k_proj, v_proj, o_proj, mlp_norm, gate, up, down), (keys, values) in zip(
                self.layers, self.buffers):
            normed = norm_rows(norm, hidden)
            query, key = self.apply_rotary(q_proj(normed).view(rows, -1, dim), k_proj(normed).view(rows, -1, dim),
                                           cos, sin)
            keys.index_copy_(2, self.slot, key[:, :, None].to(keys.dtype))
            values.index_copy_(2, self.slot, v_proj(normed).view(rows, -1, 1, dim).to(values.dtype))
            # a query head's key head is its index // groups: each key head's queries side by side,
            # attending it as a few queries of one head (no copy of the keys per query head)
            grouped = query.reshape(rows, -1, self.groups, dim).to(keys.dtype)
            attended = torch.nn.functional.scaled_dot_product_attention(
                grouped, keys, values, attn_mask=self.mask, scale=self.scaling)
            hidden = hidden + o_proj(attended.reshape(rows, -1).to(hidden.dtype))
            normed = norm_rows(mlp_norm, hidden)
            hidden = hidden + down(torch.nn.functional.silu(gate(normed)) * up(normed))  # LlamaMLP, SiLU
        hidden = norm_rows(inner.norm, hidden)
        return self.model.lm_head(hidden).float()

    def _capture(self) -> None:
        """Record ``_forward`` as a CUDA graph (CUDA only). The warm-up steps write the same slot
        the first real step will overwrite, so they change nothing the decode reads. On failure
        the steps run eagerly, with the same shapes, and a warning says why."""
        if self.mask.device.type != "cuda":
            return
        try:
            stream = torch.cuda.Stream(self.mask.device)
            stream.wait_stream(torch.cuda.current_stream(self.mask.device))
            with torch.cuda.stream(stream):
                for _ in range(WARMUP_STEPS):
                    self._forward()
            torch.cuda.current_stream(self.mask.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.logits = self._forward()
            self.graph = graph
        except RuntimeError as exc:
            self.graph, self.logits = None, None
            get_logger("polyrl.torch").warning("CUDA graph capture failed: decoding without a graph",
                                               error=str(exc).splitlines()[0][:200],
                                               fix="report it; backends.options.fixed_shape_decode = \"off\" "
                                                   "restores the row-dropping loop")
