"""Numpy reference of every objective: the ground truth backends are tested against.

Written for clarity, in float64, one token at a time where that is clearer; never used for speed.
``policy_loss`` gives the loss and metrics, ``policy_loss_grad`` its gradient with respect to
the policy's per-token log-probs (the only input a backend's autograd differentiates through;
from there the chain rule into the network is the framework's job).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyrl.algorithms.objective import Objective


def _token_terms(
    logp: np.ndarray, old: np.ndarray, ref: np.ndarray | None, adv: float, obj: Objective
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-token (loss, d loss / d logp, kl, clipped) for one sequence."""
    ratio = np.exp(logp - old)
    low, high = 1.0 - obj.clip_eps_low, 1.0 + obj.clip_eps_high
    clipped_ratio = np.clip(ratio, low, high)
    unclipped_loss = -adv * ratio
    clipped_loss = -adv * clipped_ratio
    loss = np.maximum(unclipped_loss, clipped_loss)
    # d(-A r)/dlogp = -A r; the clipped branch has zero slope outside [low, high].
    grad = np.where(unclipped_loss >= clipped_loss, -adv * ratio, 0.0)
    clipped = ((adv > 0) & (ratio > high)) | ((adv < 0) & (ratio < low))
    if obj.dual_clip is not None and adv < 0:
        cap = -adv * obj.dual_clip
        dual = loss > cap
        loss = np.where(dual, cap, loss)
        grad = np.where(dual, 0.0, grad)
        clipped = clipped | dual
    kl = np.zeros_like(logp)
    if obj.beta > 0:
        if ref is None:
            raise ValueError("beta > 0 needs reference log-probs")
        delta = ref - logp
        if obj.kl_estimator == "k1":
            kl, kl_grad = -delta, np.ones_like(logp)
        elif obj.kl_estimator == "k2":
            kl, kl_grad = 0.5 * delta**2, -delta
        else:  # k3
            kl, kl_grad = np.exp(delta) - delta - 1.0, 1.0 - np.exp(delta)
        loss = loss + obj.beta * kl
        grad = grad + obj.beta * kl_grad
    return loss, grad, kl, clipped.astype(np.float64)


def token_weights(lengths: Sequence[int], obj: Objective) -> list[np.ndarray]:
    """The factor each token's loss is multiplied by in the aggregated loss."""
    n_seq = len(lengths)
    total = max(int(sum(lengths)), 1)
    out = []
    for n in lengths:
        if obj.loss_aggregation == "seq_mean_token_mean":
            w = 1.0 / (n_seq * max(n, 1))
        elif obj.loss_aggregation == "token_mean":
            w = 1.0 / total
        else:  # seq_mean_token_sum_norm
            w = 1.0 / (n_seq * obj.max_completion_length)
        out.append(np.full(n, w, dtype=np.float64))
    return out


def _inputs(logprobs, old_logprobs, ref_logprobs):
    logp = [np.asarray(x, dtype=np.float64) for x in logprobs]
    old = logp if old_logprobs is None else [np.asarray(x, dtype=np.float64) for x in old_logprobs]
    ref = None if ref_logprobs is None else [np.asarray(x, dtype=np.float64) for x in ref_logprobs]
    return logp, old, ref


def policy_loss(
    logprobs: Sequence[np.ndarray],
    advantages: Sequence[float],
    objective: Objective,
    old_logprobs: Sequence[np.ndarray] | None = None,
    ref_logprobs: Sequence[np.ndarray] | None = None,
) -> tuple[float, dict[str, float]]:
    """The batch loss and its metrics (``kl`` and ``clip_fraction`` are token means).

    ``old_logprobs`` None means old == current (detached), as in a single-iteration step.
    """
    logp, old, ref = _inputs(logprobs, old_logprobs, ref_logprobs)
    weights = token_weights([len(x) for x in logp], objective)
    total, kl_sum, clip_sum, n_tokens = 0.0, 0.0, 0.0, 0
    for i, lp in enumerate(logp):
        loss, _, kl, clipped = _token_terms(
            lp, old[i], None if ref is None else ref[i], float(advantages[i]), objective
        )
        total += float(np.sum(loss * weights[i]))
        kl_sum += float(kl.sum())
        clip_sum += float(clipped.sum())
        n_tokens += len(lp)
    denom = max(n_tokens, 1)
    return total, {"kl": kl_sum / denom, "clip_fraction": clip_sum / denom, "tokens": n_tokens}


def policy_loss_grad(
    logprobs: Sequence[np.ndarray],
    advantages: Sequence[float],
    objective: Objective,
    old_logprobs: Sequence[np.ndarray] | None = None,
    ref_logprobs: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """d loss / d logprobs, one array per sequence (old/ref log-probs are constants)."""
    logp, old, ref = _inputs(logprobs, old_logprobs, ref_logprobs)
    weights = token_weights([len(x) for x in logp], objective)
    grads = []
    for i, lp in enumerate(logp):
        _, grad, _, _ = _token_terms(
            lp, old[i], None if ref is None else ref[i], float(advantages[i]), objective
        )
        grads.append(grad * weights[i])
    return grads
