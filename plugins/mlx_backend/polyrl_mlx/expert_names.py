"""Mixture-of-experts weights between transformers' layout and mlx-lm's.

Why: one MoE layer's experts are held three ways, and weights cross all of them.

* transformers 5 (the torch backend's state dict, hence its ``export_weights``, ``import_weights``
  and checkpoints): two fused tensors, ``<p>.experts.gate_up_proj`` [E, 2I, H] (each expert's gate
  rows, then its up rows) and ``<p>.experts.down_proj`` [E, H, I];
* mlx-lm: three stacked ``SwitchLinear`` weights ``<p>.switch_mlp.{gate,up,down}_proj.weight``
  [E, I, H], [E, I, H], [E, H, I];
* HF files written by ``save_pretrained``: one tensor per expert,
  ``<p>.experts.<e>.{gate,up,down}_proj.weight``.

The MLX backend speaks transformers' names at its border (exports, checkpoints) and reads the
fused and the per-expert files (imports, checkpoints, ``model.path``). Every conversion is
slicing, stacking or concatenating: exact.

Only model types whose transformers layout is known are converted (``FUSED_TYPES``): another
family may store its fused tensor transposed ([E, H, 2I]), which a shape check cannot tell apart
when H = 2I.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

#: model types whose transformers experts are ``experts.gate_up_proj`` [E, 2I, H] (gate first)
#: and ``experts.down_proj`` [E, H, I] (transformers' qwen2_moe/qwen3_moe modules, 5.x)
FUSED_TYPES = frozenset({"qwen2_moe", "qwen3_moe"})
SWITCH = ".switch_mlp."
GATE_UP = ".experts.gate_up_proj"
DOWN = ".experts.down_proj"
_PER_EXPERT = re.compile(r"^(?P<prefix>.+)\.experts\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$")


def _mx() -> Any:
    from polyrl_mlx._mx import mx

    return mx


def to_hf(model_type: str, tensors: Mapping[str, Any]) -> dict[str, Any]:
    """mlx-lm's stacked expert weights -> transformers' fused ones; other names unchanged."""
    if model_type not in FUSED_TYPES:
        return dict(tensors)
    out: dict[str, Any] = {}
    for name, value in tensors.items():
        prefix, sep, rest = name.partition(SWITCH)
        if not sep:
            out[name] = value
        elif rest == "gate_proj.weight":
            up = tensors[f"{prefix}{SWITCH}up_proj.weight"]
            out[prefix + GATE_UP] = _mx().concatenate([value, up], axis=1)
        elif rest == "down_proj.weight":
            out[prefix + DOWN] = value
        elif rest != "up_proj.weight":  # (in gate_up_proj) anything else keeps its name
            out[name] = value
    return out


def from_fused(model_type: str, weights: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' fused expert tensors -> mlx-lm's stacked ones; other names unchanged."""
    if model_type not in FUSED_TYPES:
        return dict(weights)
    out: dict[str, Any] = {}
    for name, value in weights.items():
        if name.endswith(GATE_UP):
            prefix = name[: -len(GATE_UP)]
            if len(value.shape) != 3 or value.shape[1] % 2:
                raise ValueError(f"{name}: shape {tuple(value.shape)} is not [experts, 2 x intermediate, hidden]")
            half = value.shape[1] // 2
            out[f"{prefix}{SWITCH}gate_proj.weight"] = value[:, :half]
            out[f"{prefix}{SWITCH}up_proj.weight"] = value[:, half:]
        elif name.endswith(DOWN):
            out[f"{name[: -len(DOWN)]}{SWITCH}down_proj.weight"] = value
        else:
            out[name] = value
    return out


def from_per_expert(model_type: str, weights: Mapping[str, Any]) -> dict[str, Any]:
    """One tensor per expert (HF files) -> mlx-lm's stacked ones; other names unchanged."""
    if model_type not in FUSED_TYPES:
        return dict(weights)
    out: dict[str, Any] = {}
    groups: dict[str, dict[int, Any]] = {}
    for name, value in weights.items():
        match = _PER_EXPERT.match(name)
        if match is None:
            out[name] = value
            continue
        target = f"{match['prefix']}{SWITCH}{match['proj']}.weight"
        groups.setdefault(target, {})[int(match["e"])] = value
    for target, experts in groups.items():
        if sorted(experts) != list(range(len(experts))):
            raise ValueError(f"{target}: the import holds experts {sorted(experts)[:8]}, not 0..{len(experts) - 1}")
        out[target] = _mx().stack([experts[e] for e in range(len(experts))])
    return out


def to_mlx(model_type: str, weights: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' fused or per-expert names -> mlx-lm's (mx arrays in, mx arrays out)."""
    return from_per_expert(model_type, from_fused(model_type, weights))


def model_classes(get_classes: Callable[[dict], tuple[type, type]]) -> Callable[[dict], tuple[type, type]]:
    """``get_classes`` (mlx-lm's ``load_model`` argument) whose model's ``sanitize`` first turns
    fused expert tensors into mlx-lm's: a folder the torch backend saved loads on MLX too."""

    def classes(config: dict) -> tuple[type, type]:
        model_class, args_class = get_classes(config)
        model_type = str(config.get("model_type", ""))
        if model_type not in FUSED_TYPES:
            return model_class, args_class
        base_sanitize = getattr(model_class, "sanitize", None)

        def sanitize(self: Any, weights: dict[str, Any]) -> dict[str, Any]:
            weights = from_fused(model_type, weights)
            return base_sanitize(self, weights) if base_sanitize is not None else weights

        return type(model_class.__name__, (model_class,), {"sanitize": sanitize}), args_class

    return classes


__all__ = ["FUSED_TYPES", "from_fused", "from_per_expert", "model_classes", "to_hf", "to_mlx"]
