"""The transformers model's decoder-block modules as ``polyrl.backend_kit.lora_targets`` sorts them,
and peft's ``target_modules`` for the chosen ones.

Why: peft, given leaf names, adapts whatever ends with them anywhere in the model (the output head
for ``lm_head``, a Qwen2-MoE's shared expert but not its routed experts for ``gate_proj``) and
raises deep inside for a norm or an MLP container; the MLX backend saw other sets for the same
config. Here the shared rule picks block paths and peft gets their full module paths, so it
adapts exactly those. transformers 5 holds a mixture-of-experts' experts as fused 3-D parameters
and its router as a router module: neither is a linear layer the sampler and the exports can
fold an adapter into, so naming them is refused (the MLX backend adapts them).
"""

from __future__ import annotations

from typing import Any

import torch

from polyrl.backend_kit.lora_targets import EXPERTS, LINEAR, OTHER, ROUTER, select_targets
from polyrl.errors import ConfigError


def decoder_blocks(model: Any) -> tuple[str, list[Any]]:
    """(path, blocks) of the model's decoder blocks: its outermost non-empty ``ModuleList``."""
    lists = [(name.count("."), -len(m), name, m) for name, m in model.named_modules()
             if isinstance(m, torch.nn.ModuleList) and len(m)]
    if not lists:
        raise ConfigError(f"this {type(model).__name__} exposes no decoder blocks for LoRA", field="lora",
                          fix="train without [lora]")
    _, _, name, blocks = min(lists, key=lambda t: (t[0], t[1]))
    return name, list(blocks)


def _expert_projections(param: str) -> list[str]:
    """The projection names a fused expert tensor stands for (``gate_up_proj``: gate and up), as
    mlx-lm names its stacked experts, so a listed name reaches the experts on both backends."""
    return ["gate_proj", "up_proj", param] if param == "gate_up_proj" else [param]


def block_modules(block: Any, head: Any = None) -> dict[str, str]:
    """Block path -> kind for one transformers decoder block."""
    from transformers.pytorch_utils import Conv1D

    named = [(p, m) for p, m in block.named_modules() if p]
    out: dict[str, str] = {}
    for path, module in named:
        fused = [n for n, p in module.named_parameters(recurse=False) if p.dim() >= 3]
        if fused:
            out[path] = EXPERTS
            out.update({f"{path}.{proj}": EXPERTS for n in fused for proj in _expert_projections(n)})
    near_experts = {p.rsplit(".", 1)[0] if "." in p else "" for p, kind in out.items() if kind == EXPERTS}
    for path, module in named:
        if path in out:
            continue
        if isinstance(module, (torch.nn.Linear, Conv1D)) and module is not head:
            out[path] = LINEAR
            continue
        weight = getattr(module, "weight", None)
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        routes = isinstance(weight, torch.nn.Parameter) and weight.dim() == 2 and parent in near_experts
        out[path] = ROUTER if routes and not isinstance(module, torch.nn.Embedding) else OTHER
    return out


def peft_targets(model: Any, lora: Any) -> list[str]:
    """Full module paths of the layers LoRA adapts (peft's ``target_modules``): the MLX backend's
    set for the same ``lora``, or a ``ConfigError`` on ``lora.target_modules``."""
    prefix, blocks = decoder_blocks(model)
    head = model.get_output_embeddings()
    per_block = [block_modules(block, head) for block in blocks]
    modules: dict[str, str] = {}
    for kinds in per_block:
        for path, kind in kinds.items():
            modules.setdefault(path, kind)
    model_type = str(getattr(model.config, "model_type", "?"))
    chosen = select_targets(modules, lora, adaptable=(), backend="torch", model_type=model_type)
    return [f"{prefix}.{i}.{path}" for i, kinds in enumerate(per_block) for path in chosen if path in kinds]


def transposed_layers(model: Any, targets: list[str]) -> bool:
    """Whether every target is transformers' ``Conv1D`` (GPT-2's layers, weights stored in x out):
    peft's ``fan_in_fan_out``, said up front; left False, peft sets it itself for each such layer
    and prints a warning over the run every time."""
    from transformers.pytorch_utils import Conv1D

    return bool(targets) and all(isinstance(model.get_submodule(path), Conv1D) for path in targets)


__all__ = ["block_modules", "decoder_blocks", "peft_targets", "transposed_layers"]
