"""The log-probability of each row's target token from a block of logits, as one autograd step.

Why not ``log_softmax(logits.float()).gather(...)`` under autograd: that path writes and re-reads a
float32 copy of the logits, keeps the whole float32 log-softmax for backward, builds the gradient
from a zero-filled ``[rows, vocab]`` tensor plus a scatter, and the entropy metric makes two more
full passes. Over a 49k-entry vocabulary those passes cost a good share of a training step on CPU.
Here forward keeps only the logits as the model produced them (bfloat16 under mixed precision:
2 bytes per entry instead of 4 or 8); backward recomputes the softmax from them, block by block,
and writes the gradient ``scale * g * (onehot(target) - softmax)`` straight in the logits' dtype.
Every block of rows is small enough to stay in cache between its passes. Same values and
gradients as the composite path to float32 rounding (tests/test_torch_target_logprobs.py).
"""

from __future__ import annotations

from typing import Any

import torch

#: Logit entries per block of the elementwise passes (16 MB in float32).
BLOCK_ELEMENTS = 1 << 22


def _rows_per_block(vocab: int) -> int:
    return max(1, BLOCK_ELEMENTS // max(vocab, 1))


def _needs_copy(block: torch.Tensor, scale: float) -> bool:
    """Whether the passes need a float32 copy of ``block`` times ``scale``: float32 logits at scale 1
    are read as they are (they are the saved logits: nothing writes into them)."""
    return block.dtype != torch.float32 or scale != 1.0


def _scaled(block: torch.Tensor, scale: float) -> torch.Tensor:
    """``block`` times ``scale`` in float32: a copy where ``_needs_copy``, else ``block`` itself."""
    if not _needs_copy(block, scale):
        return block
    x = block.to(torch.float32, copy=True)
    return x.mul_(scale) if scale != 1.0 else x


class _TargetLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, scale: float,
                with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        rows = logits.shape[0]
        picked = logits.new_empty(rows, dtype=torch.float32)
        entropy = logits.new_empty(rows if with_entropy else 0, dtype=torch.float32)
        step = _rows_per_block(logits.shape[-1])
        for start in range(0, rows, step):
            end = min(rows, start + step)
            block = logits[start:end]
            x = _scaled(block, scale)
            copied = x is not block
            # torch's fused log-softmax kernel: one read for the max, one for the sum, one write
            logp = torch.log_softmax(x, dim=-1)
            picked[start:end] = logp.gather(-1, targets[start:end, None])[:, 0]
            if with_entropy:  # H = -sum(p log p), p = exp(log p) written over the copy (never the logits)
                p = torch.exp(logp, out=x) if copied else torch.exp(logp)
                entropy[start:end] = -torch.linalg.vecdot(p, logp)
        ctx.save_for_backward(logits, targets)
        ctx.scale = scale
        ctx.mark_non_differentiable(entropy)
        return picked, entropy

    @staticmethod
    def backward(ctx: Any, grad_picked: torch.Tensor, _grad_entropy: torch.Tensor) -> tuple[Any, ...]:
        logits, targets = ctx.saved_tensors
        scale = ctx.scale
        grad = torch.empty_like(logits)
        step = _rows_per_block(logits.shape[-1])
        g = grad_picked.float() * scale
        for start in range(0, logits.shape[0], step):
            end = min(logits.shape[0], start + step)
            block = logits[start:end]
            # d(log p_t)/dx = scale * (onehot(t) - softmax(scale * x)), times the incoming gradient;
            # float32 logits at scale 1: the softmax is written straight into the gradient's rows
            copied = _needs_copy(block, scale)
            if copied:
                p = torch.softmax(_scaled(block, scale), dim=-1)
            else:
                p = torch.ops.aten._softmax.out(block, -1, False, out=grad[start:end])
            p.mul_(-g[start:end, None]).scatter_add_(-1, targets[start:end, None], g[start:end, None])
            if copied:
                grad[start:end] = p
        return grad, None, None, None


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                    with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log_softmax(logits / temperature)[row, targets[row]]`` in float32, differentiable in
    ``logits``; with ``with_entropy`` also each row's (detached) entropy of that distribution."""
    picked, entropy = _TargetLogprobs.apply(logits, targets, 1.0 / temperature, with_entropy)
    return picked, (entropy if with_entropy else None)
