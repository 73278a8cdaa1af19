"""The Llama-style RMSNorm as one autograd step, for float32 inputs and weights.

Why: transformers writes RMSNorm as ``weight * (x * rsqrt(x.pow(2).mean(-1) + eps))``: forward
writes the squares, the normalised copy and the output, and autograd's backward retraces each
of those ops in further full-width passes. A decoder has two norms per layer and every pass over
the residual stream is bound by memory bandwidth on CPU, so on a machine reading ~9 GB/s per
thread they cost a visible share of a training step. Here forward reads ``x`` once for its norm
and writes the output in two in-cache passes; backward writes two full-width tensors and reduces
with matrix-vector products (one more for the weight's gradient) instead of retracing every op
(tests/test_torch_rms_norm.py: same values and gradients as the formula in float64).

Only modules whose forward is transformers' Llama RMSNorm code (Llama, Qwen2/3, Mistral and the
other "copied from Llama" norms; compared by bytecode, not by name, so a family with another
formula such as Gemma's ``1 + weight`` keeps its own) get the fused forward, and only for float32
input and weight; any other call (bfloat16 models, FSDP's sharded weights) runs the module's own
forward.
"""

from __future__ import annotations

import types
from typing import Any

import torch

#: ``module.forward`` attribute marking a norm whose forward this module replaced.
FUSED_MARK = "_polyrl_fused_rms_norm"


class _RmsNorm(torch.autograd.Function):
    """``weight * x / sqrt(mean(x^2) + eps)`` over the rows of 2-D ``x``."""

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        width = rows.shape[-1]
        # 1 / sqrt(mean(x^2) + eps) from one read of x (its norm), no squared copy written
        rstd = torch.linalg.vector_norm(rows, dim=-1).square_().div_(width).add_(eps).rsqrt_()
        ctx.save_for_backward(rows, rstd, weight)
        return torch.mul(rows, rstd[:, None]).mul_(weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        rows, rstd, weight = ctx.saved_tensors
        width = rows.shape[-1]
        grad = grad.contiguous()
        # y = w * x * r with r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / n:
        # dx = r * (g * w) - x * (r^3 / n) * sum_k g_k w_k x_k
        gx = torch.mul(grad, rows)
        coef = torch.mv(gx, weight).mul_(rstd.pow(3)).div_(width)
        grad_weight = torch.mv(gx.t(), rstd) if ctx.needs_input_grad[1] else None  # sum_i g x r
        grad_rows = torch.mul(grad, weight).mul_(rstd[:, None]).addcmul_(rows, coef[:, None], value=-1)
        return grad_rows, grad_weight, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * x / sqrt(mean(x^2, -1) + eps)`` for float32 ``x`` and 1-D ``weight``."""
    with torch.autocast(x.device.type, enabled=False):  # all float32 already: nothing to cast
        out = _RmsNorm.apply(x.reshape(-1, x.shape[-1]), weight, float(eps))
    return out.view(x.shape)


def _llama_code() -> types.CodeType | None:
    try:
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
    except ImportError:  # a transformers without Llama: nothing to match against
        return None
    return LlamaRMSNorm.forward.__code__


def same_code(a: types.CodeType, b: types.CodeType) -> bool:
    """Whether two functions' code is the same (bytecode, constants, names, locals)."""
    return (a.co_code, a.co_consts, a.co_names, a.co_varnames) == (b.co_code, b.co_consts, b.co_names, b.co_varnames)


def _plain_call(module: Any, x: torch.Tensor) -> bool:
    weight = module.weight
    return (type(x) is torch.Tensor and type(weight) in (torch.Tensor, torch.nn.Parameter)
            and x.dtype == torch.float32 and weight.dtype == torch.float32 and weight.dim() == 1
            and x.shape[-1] == weight.shape[0] and x.device == weight.device)


def fuse_rms_norms(model: torch.nn.Module) -> int:
    """Give every Llama-style RMSNorm in ``model`` the fused forward; returns how many."""
    reference = _llama_code()
    if reference is None:
        return 0
    count = 0
    for module in model.modules():
        forward = type(module).forward
        if (hasattr(module.forward, FUSED_MARK) or not hasattr(forward, "__code__")
                or not same_code(forward.__code__, reference)
                or not isinstance(getattr(module, "variance_epsilon", None), (int, float))):
            continue

        def fused(self: Any, x: torch.Tensor) -> torch.Tensor:
            if not _plain_call(self, x):
                return type(self).forward(self, x)
            return rms_norm(x, self.weight, self.variance_epsilon)

        setattr(fused, FUSED_MARK, True)
        module.forward = types.MethodType(fused, module)
        count += 1
    return count
