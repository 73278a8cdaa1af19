"""Quantized (packed) MLX layers as weights cross them: dequantized out, re-quantized in.

Why: exports, syncs and checkpoints carry float weights, while a quantized model holds packed
integers plus the parameters to unpack them. Besides ``scales`` (and affine ``biases``), mlx-lm's
nvfp4 experts may hold one float32 ``global_scale`` per expert (``QuantizedSwitchLinear`` built
with ``global_scale=True``, e.g. ``quantize_model(..., mode="nvfp4", global_scale=True)``):
unpacking without it is off by orders of magnitude, and ``mx.dequantize`` takes only a scalar
one, so such experts are unpacked (and packed) one expert at a time.

MLX runs those experts' ``gather_qmm`` on a GPU only; on its CPU a model holding them loads and
then fails at its first forward, so ``check_runs_here`` refuses it when it loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from polyrl.errors import ConfigError

from polyrl_mlx._mx import mx, nn

#: A packed layer's leaves that are not a float weight of the model (they unpack ``weight``).
PACKING_LEAVES = ("scales", "biases", "global_scale")


def is_packed(module: Any) -> bool:
    """A layer holding packed weights (a quantized MoE's experts: ``QuantizedSwitchLinear``)."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear

    return isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding, QuantizedSwitchLinear))


def global_scale(module: Any) -> mx.array | None:
    """The per-expert nvfp4 tensor scales [E] of a packed layer, or None."""
    value = module.get("global_scale") if isinstance(module, nn.Module) else None
    return value if isinstance(value, mx.array) else None


def _mode(module: Any) -> str:
    return str(getattr(module, "mode", "affine"))


def _float_dtype(module: Any) -> Any:
    """Affine scales are in the weights' dtype; the fp modes' are uint8 codes, whose unpacked
    values (times a float32 global scale) ``mx.dequantize`` would round to bfloat16: float32."""
    dtype = module.scales.dtype
    return dtype if mx.issubdtype(dtype, mx.floating) else mx.float32


def dequantized(module: Any) -> mx.array:
    """The float weight a packed layer computes with."""
    scale, dtype = global_scale(module), _float_dtype(module)
    if scale is None:
        return mx.dequantize(module.weight, module.scales, module.get("biases"), group_size=module.group_size,
                             bits=module.bits, mode=_mode(module), dtype=dtype)
    return mx.stack([mx.dequantize(module.weight[e], module.scales[e], None, group_size=module.group_size,
                                   bits=module.bits, mode=_mode(module), global_scale=scale[e], dtype=dtype)
                     for e in range(scale.shape[0])])


def packed_like(module: Any, value: mx.array) -> dict[str, mx.array]:
    """``value`` (a float weight of the layer's shape) packed as ``module`` packs: leaf -> array.

    A layer with per-expert global scales gets each expert's new one (its largest |weight|, in
    float32, as mlx-lm draws them), so imported weights of another range are not clipped."""
    mode = _mode(module)
    scale = global_scale(module)
    if scale is None:
        packed = mx.quantize(value.astype(_float_dtype(module)), group_size=module.group_size, bits=module.bits,
                             mode=mode)
        out = {"weight": packed[0], "scales": packed[1]}
        if len(packed) > 2 and packed[2] is not None and "biases" in module:
            out["biases"] = packed[2]
        return out
    if len(value.shape) != 3 or value.shape[0] != scale.shape[0]:
        raise ValueError(f"shape {tuple(value.shape)} is not [{scale.shape[0]} experts, out, in]")
    value = value.astype(mx.float32)
    amax = mx.max(mx.abs(value), axis=(-2, -1))
    experts = [mx.quantize(value[e], group_size=module.group_size, bits=module.bits, mode=mode,
                           global_scale=amax[e]) for e in range(value.shape[0])]
    return {"weight": mx.stack([q[0] for q in experts]), "scales": mx.stack([q[1] for q in experts]),
            "global_scale": amax.astype(scale.dtype)}


def global_scale_layers(model: Any) -> list[str]:
    """Paths of ``model``'s packed layers holding per-expert global scales."""
    return [path for path, module in model.named_modules() if is_packed(module) and global_scale(module) is not None]


def check_runs_here(model: Any, device: Any, model_dir: Path) -> None:
    """Refuse, on MLX's CPU, a model whose nvfp4 experts hold global scales (no CPU kernel)."""
    if device != mx.cpu:
        return
    layers = global_scale_layers(model)
    if layers:
        raise ConfigError(
            f"{str(model_dir)!r} holds nvfp4 experts with per-expert global scales ({layers[0]}, "
            f"{len(layers)} layers), which MLX runs on a GPU only (its CPU gather_qmm has no global scale)",
            field="device", fix="use device = \"gpu\" where MLX sees a GPU, or an unquantized copy "
                                "(`polyrl convert MODEL OUT --to hf` dequantizes it)")


__all__ = ["PACKING_LEAVES", "check_runs_here", "dequantized", "global_scale", "global_scale_layers", "is_packed",
           "packed_like"]
