"""The MLX model's decoder-block modules as ``polyrl.backend_kit.lora_targets`` sorts them.

Why: mlx-lm holds a mixture-of-experts' router as a plain ``nn.Linear`` (``mlp.gate``) where
transformers 5 holds a router module, so "every linear layer" read on the MLX model adapted the
router and the torch backend did not. A linear layer beside stacked experts with one output per
expert is the router here; the experts (``SwitchLinear``) are experts. Which of them train is the
shared rule's call; MLX can adapt both when they are named (``LoRALinear``, ``LoRASwitchLinear``).
"""

from __future__ import annotations

from typing import Any

from polyrl.backend_kit.lora_targets import EXPERTS, LINEAR, OTHER, ROUTER, select_targets
from polyrl.errors import ConfigError
from polyrl_mlx._mx import nn


def _ancestors(path: str) -> set[str]:
    parts = path.split(".")
    return {".".join(parts[:i]) for i in range(len(parts))}


def block_modules(block: Any) -> dict[str, str]:
    """Block path -> kind for one decoder block of an mlx-lm model."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear, SwitchLinear

    named = [(p, m) for p, m in block.named_modules() if p]
    experts = {p: int(m.weight.shape[0]) for p, m in named if isinstance(m, (SwitchLinear, QuantizedSwitchLinear))}
    near_experts = set().union(*(_ancestors(p) for p in experts)) if experts else set()
    out: dict[str, str] = {}
    for path, module in named:
        if path in experts:
            out[path] = EXPERTS
        elif isinstance(module, (nn.Linear, nn.QuantizedLinear)):
            parent = path.rsplit(".", 1)[0] if "." in path else ""
            routes = parent in near_experts and int(module.weight.shape[0]) in experts.values()
            out[path] = ROUTER if routes else LINEAR
        else:
            out[path] = OTHER
    return out


def lora_keys(model: Any, lora: Any, model_type: str) -> list[str]:
    """mlx-lm's ``keys`` (block paths) for ``linear_to_lora_layers``: the same weights the torch
    backend adapts for ``lora``, or a ``ConfigError`` on ``lora.target_modules``."""
    layers = getattr(model, "layers", None)
    if not layers:
        raise ConfigError("this model exposes no transformer layers for LoRA", field="lora")
    modules: dict[str, str] = {}
    for block in layers:
        for path, kind in block_modules(block).items():
            modules.setdefault(path, kind)
    return select_targets(modules, lora, adaptable={ROUTER, EXPERTS}, backend="mlx", model_type=model_type)


__all__ = ["block_modules", "lora_keys"]
