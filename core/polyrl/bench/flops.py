"""FLOPs of a GRPO step's phases for a decoder-only transformer, from its HF ``config.json``.

Why: model FLOPs utilisation (achieved FLOP/s over the machine's measured matmul peak) says how far
each phase is from the hardware limit, independent of which framework ran it. The count is the
*workload's* minimum, the same for every framework: each prompt's tokens once per group, each
completion token once, ``lm_head`` only where a log-prob is needed, attention over the real
context. A framework that repeats prompts or computes full-vocabulary logits everywhere does more
work than this and shows a lower utilisation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import attrs


@attrs.frozen
class ModelShape:
    """The sizes that set a Llama-style decoder's matmul FLOPs."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, model_dir: str | Path) -> ModelShape:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        heads = int(cfg["num_attention_heads"])
        return cls(hidden=int(cfg["hidden_size"]), intermediate=int(cfg["intermediate_size"]),
                   layers=int(cfg["num_hidden_layers"]), heads=heads,
                   kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
                   vocab=int(cfg["vocab_size"]))

    @property
    def layer_params(self) -> int:
        """Weights one token multiplies through in one layer (q, k, v, o, gate, up, down)."""
        q_out = self.heads * self.head_dim
        kv_out = 2 * self.kv_heads * self.head_dim
        return self.hidden * (q_out + kv_out) + q_out * self.hidden + 3 * self.hidden * self.intermediate

    @property
    def layer_linear_dims(self) -> int:
        """Sum of (in + out) over one layer's seven linears: what a rank-r adapter on each costs per
        token (``2 r (in + out)`` FLOPs forward)."""
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return ((self.hidden + q_out) * 2 + (self.hidden + kv_out) * 2
                + (self.hidden + self.intermediate) * 3)

    def token_linear_flops(self) -> float:
        """Forward FLOPs of one token through the backbone's linears (every layer)."""
        return self.layers * 2.0 * self.layer_params

    def token_attention_flops(self, context: int) -> float:
        """Forward FLOPs of one token's attention over ``context`` positions (scores and weighted sum)."""
        return self.layers * 4.0 * self.heads * self.head_dim * context

    @property
    def head_flops(self) -> float:
        """Forward FLOPs of ``lm_head`` for one position."""
        return 2.0 * self.hidden * self.vocab


def group_forward_parts(shape: ModelShape, prompt_lens: Sequence[int], completion_lens: Sequence[int],
                        owners: Sequence[int]) -> dict[str, float]:
    """Forward FLOPs of a batch where each distinct prompt (``owners``) runs once, split: the
    backbone's linears, attention over the real context, ``lm_head`` on completion positions only,
    and the number of token positions through the backbone."""
    seen: set[int] = set()
    tokens, attention, heads = 0, 0.0, 0
    for owner, p, c in zip(owners, prompt_lens, completion_lens):
        if owner not in seen:
            tokens += p
            attention += sum(shape.token_attention_flops(i + 1) for i in range(p))
            seen.add(owner)
        tokens += c
        attention += sum(shape.token_attention_flops(p + j + 1) for j in range(c))
        heads += c
    return {"linear": tokens * shape.token_linear_flops(), "attention": attention,
            "head": heads * shape.head_flops, "tokens": float(tokens)}


def group_forward_flops(shape: ModelShape, prompt_lens: Sequence[int], completion_lens: Sequence[int],
                        owners: Sequence[int]) -> float:
    """Forward FLOPs of a batch where each distinct prompt (``owners``) runs once."""
    parts = group_forward_parts(shape, prompt_lens, completion_lens, owners)
    return parts["linear"] + parts["attention"] + parts["head"]


def step_flops(shape: ModelShape, prompt_lens: Sequence[int], completion_lens: Sequence[int],
               owners: Sequence[int], *, lora: bool, lora_rank: int = 16) -> dict[str, float]:
    """Minimum FLOPs of each phase of one GRPO step.

    ``generate``: prefill once per prompt, one forward per new token (``lm_head`` each step; LoRA
    adapters folded into the weights). ``logprobs``: one teacher-forced forward. ``train``: forward
    plus backward. Full-parameter: the backward is twice the forward (input and weight gradients; for
    attention, the gradients of its two products' inputs). LoRA (rank ``lora_rank`` on all seven
    linears of every layer, polyrl's default): the frozen linears and ``lm_head`` need input gradients
    only (1x their forward), attention still 2x, and the adapters add their own forward, input and
    weight gradients (3 x ``2 r (in + out)`` per token and linear).
    """
    parts = group_forward_parts(shape, prompt_lens, completion_lens, owners)
    forward = parts["linear"] + parts["attention"] + parts["head"]
    if not lora:
        train = 3.0 * forward
    else:
        adapters = 3.0 * parts["tokens"] * shape.layers * 2.0 * lora_rank * shape.layer_linear_dims
        train = 2.0 * (parts["linear"] + parts["head"]) + 3.0 * parts["attention"] + adapters
    return {"generate": forward, "logprobs": forward, "train": train}
