"""peft's LoRA ``Linear`` forward as one autograd step, its adapter product added inside the matmul.

Why: peft computes ``result + lora_B(lora_A(x)) * scaling``: the adapter's full-width output is
written, scaled in a second pass and added in a third, and backward repeats the scaling and sums
the two input gradients in further full-width passes. With the base weights frozen those passes
cost as much as a good share of the matmuls themselves on CPU. Here the scale goes on the rank-r
intermediate (``r`` columns, not ``out_features``), the adapter product is accumulated into the
base output by ``addmm_`` (the GEMM's own ``C += A @ B``), and backward accumulates the adapter's
input gradient into the base one the same way. Same function, same gradients up to the order of
the float roundings (the adapter's sum is added inside the GEMM, B's gradient is reduced in the
other order), so a long run's last bits, and with them its sampled tokens, can differ from peft's.

Only the plain case runs here (one active adapter, no dropout, no DoRA or other variant, a dense
``nn.Linear`` base, adapters enabled and unmerged); anything else goes through peft's own forward,
so ``disable_adapter()`` (the reference policy) and merging keep peft's behaviour.
"""

from __future__ import annotations

import types
from typing import Any

import torch

#: ``layer.forward`` attribute marking a layer whose forward this module replaced.
FUSED_MARK = "_polyrl_fused_lora"


class _LoraLinear(torch.autograd.Function):
    """``x @ W.T + bias + scale * (x @ A.T) @ B.T`` over 2-D ``x``; gradients for what needs one."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float) -> torch.Tensor:
        hidden = torch.mm(x, lora_a.t()).mul_(scale)  # [rows, r]: the scale costs r columns here
        out = torch.addmm(bias, x, weight.t()) if bias is not None else torch.mm(x, weight.t())
        out.addmm_(hidden, lora_b.t())
        ctx.save_for_backward(x, weight, lora_a, lora_b, hidden)
        ctx.scale = scale
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, lora_a, lora_b, hidden = ctx.saved_tensors
        need_x, need_w, need_bias, need_a, need_b = ctx.needs_input_grad[:5]
        grad = grad.contiguous()
        grad_hidden = torch.mm(grad, lora_b).mul_(ctx.scale)  # [rows, r]: for x and A alike
        grad_x = grad_w = grad_bias = grad_a = grad_b = None
        if need_x:
            grad_x = torch.mm(grad, weight).addmm_(grad_hidden, lora_a)
        if need_w:
            grad_w = torch.mm(grad.t(), x)
        if need_bias and ctx.has_bias:
            grad_bias = grad.sum(0)
        if need_a:
            grad_a = torch.mm(grad_hidden.t(), x)
        if need_b:  # as (hidden.T @ grad).T: MKL reads the tall grad far faster in this order
            grad_b = torch.mm(hidden.t(), grad).t()
        return grad_x, grad_w, grad_bias, grad_a, grad_b, None


def _plain(layer: Any, adapter: str, extra: bool) -> bool:
    """Whether ``layer`` computes plain LoRA now (else peft's forward runs, unchanged);
    ``extra``: the call passed more than the input (peft's ``adapter_names`` and the like)."""
    return (not extra and not layer.disable_adapters and not layer.merged
            and list(layer.active_adapters) == [adapter] and adapter not in layer.lora_variant
            and isinstance(layer.lora_dropout[adapter], torch.nn.Identity)
            and type(layer.get_base_layer()) is torch.nn.Linear
            and not getattr(layer, "fan_in_fan_out", False))


def _cast(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return t if t is None or t.dtype == dtype else t.to(dtype)


def fused_forward(layer: Any, adapter: str, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``layer``'s forward: the fused step in the plain case, peft's forward otherwise."""
    if not _plain(layer, adapter, bool(args or kwargs)):
        return type(layer).forward(layer, x, *args, **kwargs)
    base = layer.get_base_layer()
    weight, bias = base.weight, base.bias
    lora_a, lora_b = layer.lora_A[adapter].weight, layer.lora_B[adapter].weight
    # what autocast would do to each matmul's operands, done here once; the step itself runs with
    # autocast off (it would otherwise cast again inside)
    dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
    with torch.autocast(x.device.type, enabled=False):
        flat = _cast(x.reshape(-1, x.shape[-1]), dtype)
        out = _LoraLinear.apply(flat, _cast(weight, dtype), _cast(bias, dtype), _cast(lora_a, dtype),
                                _cast(lora_b, dtype), float(layer.scaling[adapter]))
    return out.reshape(*x.shape[:-1], out.shape[-1])


def fuse_lora_layers(model: torch.nn.Module, adapter: str) -> int:
    """Give every peft LoRA ``Linear`` in ``model`` the fused forward; returns how many."""
    from peft.tuners.lora import Linear as LoraLinear

    count = 0
    for module in model.modules():
        if type(module) is LoraLinear and not hasattr(module.forward, FUSED_MARK):
            def forward(self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
                return fused_forward(self, adapter, x, *args, **kwargs)
            setattr(forward, FUSED_MARK, True)
            module.forward = types.MethodType(forward, module)
            count += 1
    return count
