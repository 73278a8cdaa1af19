"""mlx-lm's LoRA layers as polyrl merges, resets and switches them off.

Why: mlx-lm wraps a linear layer in ``LoRALinear`` (``lora_a`` [in, r], ``lora_b`` [r, out]) and a
mixture-of-experts' stacked experts (``SwitchLinear``, which ``lora.target_modules`` reaches by
naming ``gate_proj``/``up_proj``/``down_proj`` on qwen2_moe/qwen3_moe) in ``LoRASwitchLinear``,
one adapter per expert (``lora_a`` [E, r, in], ``lora_b`` [E, out, r]; expert e computes
``W_e x + scale * B_e A_e x``). Exports, syncs, checkpoints, the reference (adapters off) and an
import's adapter reset must treat both kinds, or an expert's adapter is silently left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyrl_mlx._mx import mx
from polyrl_mlx.packed import dequantized, is_packed


def lora_types() -> tuple[type, ...]:
    """The LoRA wrappers polyrl merges: a linear layer's and a MoE's experts'."""
    from mlx_lm.tuner.lora import LoRALinear, LoRASwitchLinear

    return LoRALinear, LoRASwitchLinear


def lora_modules(model: Any) -> dict[str, Any]:
    """Path -> LoRA layer, for every adapted layer of ``model``."""
    kinds = lora_types()
    return {name: m for name, m in model.named_modules() if isinstance(m, kinds)}


def base_weight(module: Any) -> mx.array:
    """The wrapped layer's float weight (dequantized when packed), without the adapter."""
    base = module.linear
    return dequantized(base) if is_packed(base) else base.weight


def delta(module: Any) -> mx.array:
    """``scale * B A`` in the base weight's layout: [out, in], or [E, out, in] for experts."""
    if len(module.lora_a.shape) == 3:  # LoRASwitchLinear: per expert, B_e [out, r] @ A_e [r, in]
        return module.scale * (module.lora_b @ module.lora_a)
    return (module.scale * module.lora_b.T) @ module.lora_a.T  # LoRALinear: A [in, r], B [r, out]


def merged_weight(module: Any) -> mx.array:
    """``W + scale * B A``: the weight the adapted layer computes with."""
    weight = base_weight(module)
    return weight + delta(module).astype(weight.dtype)


def fresh_adapters(module: Any) -> None:
    """A fresh init as mlx-lm draws it: A uniform in +-1/sqrt(in), B zero (the layer = its base)."""
    shape = tuple(module.lora_a.shape)
    in_dims = shape[-1] if len(shape) == 3 else shape[0]
    bound = 1 / np.sqrt(in_dims)
    module.lora_a = mx.random.uniform(low=-bound, high=bound, shape=shape)
    module.lora_b = mx.zeros_like(module.lora_b)


__all__ = ["base_weight", "delta", "fresh_adapters", "lora_modules", "lora_types", "merged_weight"]
