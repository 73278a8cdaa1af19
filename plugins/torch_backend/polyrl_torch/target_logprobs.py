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

#: Logit entries per block of the elementwise passes: 2 MB in float32, so a block's log-softmax,
#: exp and entropy passes find it in a core's L2 rather than in L3 or memory
#: (``bench/step_pieces_ab.py`` times this against the 16 MB blocks first used).
BLOCK_ELEMENTS = 1 << 19


def _rows_per_block(logits: torch.Tensor) -> int:
    """Rows per block of the elementwise passes: an L2-sized block on the CPU; on a GPU every row
    at once (each block costs a few kernel launches from Python, and there the launches cost, not
    the cache: 10-row blocks of a 49k vocabulary made thousands of them per training step)."""
    rows, vocab = logits.shape
    if logits.device.type != "cpu":
        return max(rows, 1)
    return max(1, BLOCK_ELEMENTS // max(vocab, 1))


def _needs_copy(block: torch.Tensor, scale: float) -> bool:
    """Whether the passes need a float32 copy of ``block`` times ``scale``: float32 logits at scale 1
    are read as they are (they are the saved logits: nothing writes into them)."""
    return block.dtype != torch.float32 or scale != 1.0


def _scaled(block: torch.Tensor, scale: float, into: torch.Tensor) -> torch.Tensor:
    """``block`` times ``scale`` in float32: written into ``into``'s first rows where ``_needs_copy``,
    else ``block`` itself."""
    if not _needs_copy(block, scale):
        return block
    x = into[: block.shape[0]].copy_(block)
    return x.mul_(scale) if scale != 1.0 else x


def _block_buffer(logits: torch.Tensor, rows: int, needed: bool = True) -> torch.Tensor:
    """A float32 buffer of ``rows`` logit rows (none when not ``needed``), reused by every block of a
    pass. Where freed memory goes back to the OS (``retain_freed_memory`` off, a C library other
    than glibc) a fresh tensor of this size per block is a fresh mapping, and first-touching its
    pages cost as much as the pass over it (SmolLM2's 1,024 rows with the entropy: forward 0.36 ->
    0.23 s in a plain process)."""
    return logits.new_empty((rows if needed else 0, logits.shape[-1]), dtype=torch.float32)


class _TargetLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, scale: float,
                with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
        rows, vocab = logits.shape
        picked = logits.new_empty(rows, dtype=torch.float32)
        entropy = logits.new_empty(rows if with_entropy else 0, dtype=torch.float32)
        step = _rows_per_block(logits)
        height = min(step, rows)
        scaled_rows = _block_buffer(logits, height, _needs_copy(logits, scale))
        logp_rows = _block_buffer(logits, height)
        probs_rows = _block_buffer(logits, height, with_entropy)
        for start in range(0, rows, step):
            end = min(rows, start + step)
            x = _scaled(logits[start:end], scale, scaled_rows)
            # torch's fused log-softmax kernel: one read for the max, one for the sum, one write
            logp = torch.ops.aten._log_softmax.out(x, -1, False, out=logp_rows[: end - start])
            picked[start:end] = logp.gather(-1, targets[start:end, None])[:, 0]
            if with_entropy:  # H = -sum(p log p), p = exp(log p)
                p = torch.exp(logp, out=probs_rows[: end - start])
                entropy[start:end] = p.mul_(logp).sum(-1).neg_()
        ctx.save_for_backward(logits, targets)
        ctx.scale = scale
        ctx.mark_non_differentiable(entropy)
        return picked, entropy

    @staticmethod
    def backward(ctx: Any, grad_picked: torch.Tensor, _grad_entropy: torch.Tensor) -> tuple[Any, ...]:
        logits, targets = ctx.saved_tensors
        scale = ctx.scale
        grad = torch.empty_like(logits)
        step = _rows_per_block(logits)
        g = grad_picked.float() * scale
        # float32 logits at scale 1: the softmax is written straight into the gradient's rows
        copied = _needs_copy(logits, scale)
        height = min(step, logits.shape[0])
        scaled_rows, probs_rows = _block_buffer(logits, height, copied), _block_buffer(logits, height, copied)
        for start in range(0, logits.shape[0], step):
            end = min(logits.shape[0], start + step)
            block = logits[start:end]
            # d(log p_t)/dx = scale * (onehot(t) - softmax(scale * x)), times the incoming gradient
            if copied:
                x = _scaled(block, scale, scaled_rows)
                p = torch.ops.aten._softmax.out(x, -1, False, out=probs_rows[: end - start])
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
