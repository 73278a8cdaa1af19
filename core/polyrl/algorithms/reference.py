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


#: |trainer - sampler| log-prob gap (nats) above which a token counts in ``mismatch_over``.
MISMATCH_THRESHOLD = 0.1
#: VESPO's clamps on log-ratios (TRL's ``get_gamma_weights``): per token [-20, 20], the
#: sequence's log w in [log 1e-8, 20], so w^k and exp(-lambda w) stay finite.
VESPO_LOG_MIN = float(np.log(1e-8))
VESPO_LOG_MAX = 20.0


def _ratio(logp: np.ndarray, old: np.ndarray, obj: Objective) -> np.ndarray:
    """Per-token importance ratio (GSPO: the sequence's, repeated over its tokens).

    Its derivative w.r.t. the log of its argument is the ratio itself: ``d r_t / d logp_t = r_t``
    at token level; at sequence level ``d s / d logp_t = s / |y|`` for every token (see
    ``_spread``)."""
    if obj.importance_sampling_level == "sequence":  # GSPO: exp of the mean log ratio
        s = float(np.exp(np.mean(logp - old))) if len(logp) else 1.0
        return np.full(len(logp), s)
    return np.exp(logp - old)


def _spread(policy_grad: np.ndarray, obj: Objective) -> np.ndarray:
    """Per-token gradients of the policy term once chained through the ratio.

    At token level each token's loss depends on its own log-prob only. At sequence level every
    token's loss depends on the shared ratio ``s``, which moves by ``s / |y|`` per token: the
    sequence's summed slope is shared evenly among its tokens."""
    if obj.importance_sampling_level == "sequence" and obj.policy_loss in ("ppo", "sapo") and len(policy_grad):
        return np.full(len(policy_grad), policy_grad.sum() / len(policy_grad))
    return policy_grad


def mismatch_weights(old: np.ndarray, sampler: np.ndarray, obj: Objective) -> tuple[np.ndarray, np.ndarray]:
    """The detached correction weight per token and whether the cap changed it (TIS/MIS). A token
    the sampler could not score (NaN log-prob) gets no correction (weight 1, gap 0 in a sequence's
    sum), as TRL's ``importance_sampling_ratio``: NaN would turn the whole loss NaN and skip the step."""
    delta = np.nan_to_num(np.asarray(old, np.float64) - np.asarray(sampler, np.float64), nan=0.0)
    if obj.mismatch_level == "sequence":
        delta = np.full(len(old), float(delta.sum()))
    return capped_weights(np.exp(delta), obj)


def capped_weights(w: np.ndarray, obj: Objective) -> tuple[np.ndarray, np.ndarray]:
    """Raw ratios ``w`` after the correction's cap (TIS truncates, MIS zeroes what exceeds it;
    none: all 1), and where the cap changed them."""
    w = np.asarray(w, np.float64)
    over = w > obj.mismatch_cap
    if obj.mismatch_correction == "tis":
        return np.minimum(w, obj.mismatch_cap), over
    if obj.mismatch_correction == "mis":
        return np.where(over, 0.0, w), over
    return np.ones_like(w), np.zeros_like(over)


def vespo_weight(logp: np.ndarray, old: np.ndarray, sampler: np.ndarray | None, adv: float,
                 obj: Objective) -> float:
    """VESPO's detached sequence weight ``phi(w) = exp(lambda + k log w - lambda w)``.

    ``log w`` is the sum of the clamped token log-ratios, plus the clamped logs of the mismatch
    correction's token weights when one is on (TRL folds ``importance_sampling_ratio`` in here
    instead of multiplying the loss). ``(k, lambda)`` follow the advantage's sign (A >= 0: pos)."""
    log_w = float(np.clip(logp - old, -VESPO_LOG_MAX, VESPO_LOG_MAX).sum())
    if obj.corrects_mismatch:
        if sampler is None:
            raise ValueError("mismatch_correction needs the sampler's log-probs")
        w, _ = mismatch_weights(old, sampler, obj)
        with np.errstate(divide="ignore"):
            log_w += float(np.clip(np.log(w), VESPO_LOG_MIN, VESPO_LOG_MAX).sum())
    log_w = float(np.clip(log_w, VESPO_LOG_MIN, VESPO_LOG_MAX))
    k, lam = (obj.vespo_k_pos, obj.vespo_lambda_pos) if adv >= 0 else (obj.vespo_k_neg, obj.vespo_lambda_neg)
    lam = max(lam, 1e-4)
    phi = float(np.exp(lam + k * log_w - lam * np.exp(log_w)))
    return phi if np.isfinite(phi) else 0.0


def off_policy_keep(logp: np.ndarray, old: np.ndarray, sampler: np.ndarray | None, adv: float,
                    obj: Objective) -> float:
    """Off-policy sequence masking (DeepSeek-V3.2 eq. 9, TRL's ``get_off_policy_mask``): 1.0 keeps
    the sequence's policy term, 0.0 drops it. Kept when the advantage is >= 0 or the token mean of
    ``sampler - logp`` (the sampler's log-prob minus the current one, detached; an unscorable NaN
    token counts as 0 but still in the mean's count) is at most ``off_policy_mask_threshold``.
    Without sampler log-probs the old ones stand in (TRL's fallback)."""
    if obj.off_policy_mask_threshold is None or adv >= 0:
        return 1.0
    behaviour = old if sampler is None else sampler
    gap = np.nan_to_num(behaviour - logp, nan=0.0)
    mean = float(gap.sum()) / max(len(gap), 1)
    return 1.0 if mean <= obj.off_policy_mask_threshold else 0.0


def _token_terms(
    logp: np.ndarray, old: np.ndarray, ref: np.ndarray | None, sampler: np.ndarray | None, adv: float,
    obj: Objective, selected: np.ndarray | None = None, entropy: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-token (loss, policy slope, kl slope, kl, clipped) for one sequence.

    The policy slope is d loss_t / d log r_t (``_spread`` turns it into d loss / d logp once the
    aggregation weights are applied); the KL slope is d loss_t / d logp_t."""
    ratio = _ratio(logp, old, obj)
    dratio = ratio
    low, high = 1.0 - obj.clip_eps_low, 1.0 + obj.clip_eps_high
    if obj.policy_loss == "cispo":
        weight = np.minimum(ratio, high)  # detached: a constant factor
        loss = -adv * weight * logp
        grad = -adv * weight
        clipped = ratio > high
    elif obj.policy_loss == "sapo":  # a sigmoid gate instead of the clip: nothing is clipped
        tau = obj.sapo_temperature_pos if adv > 0 else obj.sapo_temperature_neg
        gate = 1.0 / (1.0 + np.exp(-tau * (ratio - 1.0)))
        loss = -adv * gate * 4.0 / tau
        grad = -adv * 4.0 * gate * (1.0 - gate) * dratio  # d/dlogp of -A (4/tau) sigmoid(tau (r - 1))
        clipped = np.zeros(len(ratio), dtype=bool)
    elif obj.policy_loss == "vespo":  # detached sequence weight on a REINFORCE term
        phi = vespo_weight(logp, old, sampler, adv, obj)
        loss = -adv * phi * logp
        grad = np.full(len(logp), -adv * phi)
        clipped = np.zeros(len(logp), dtype=bool)
    else:
        clipped_ratio = np.clip(ratio, low, high)
        unclipped_loss = -adv * ratio
        clipped_loss = -adv * clipped_ratio
        loss = np.maximum(unclipped_loss, clipped_loss)
        # d(-A r)/dlogp = -A dr/dlogp; the clipped branch has zero slope outside [low, high].
        grad = np.where(unclipped_loss >= clipped_loss, -adv * dratio, 0.0)
        clipped = ((adv > 0) & (ratio > high)) | ((adv < 0) & (ratio < low))
        if obj.dual_clip is not None and adv < 0:
            cap = -adv * obj.dual_clip
            dual = loss > cap
            loss = np.where(dual, cap, loss)
            grad = np.where(dual, 0.0, grad)
            clipped = clipped | dual
    if obj.corrects_mismatch and obj.policy_loss != "vespo":  # vespo folds it into its weight
        if sampler is None:
            raise ValueError("mismatch_correction needs the sampler's log-probs")
        w, _ = mismatch_weights(old, sampler, obj)
        loss, grad = loss * w, grad * w
    keep = off_policy_keep(logp, old, sampler, adv, obj)  # the policy term only: not the KL, not the bonus
    loss, grad = loss * keep, grad * keep
    if selected is not None:  # top_entropy_quantile: the policy term on high-entropy tokens only
        loss, grad = loss * selected, grad * selected
    if obj.entropy_coef and entropy is not None:
        loss = loss - obj.entropy_coef * entropy
    kl, kl_grad = np.zeros_like(logp), np.zeros_like(logp)
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
        if obj.kl_bias_correction:  # kl x r: its slope through r joins the policy slope (d/d log r)
            grad = grad + obj.beta * kl * ratio
            kl, kl_grad = kl * ratio, kl_grad * ratio
        loss = loss + obj.beta * kl
    return loss, grad, obj.beta * kl_grad, kl, clipped.astype(np.float64)


def clip_regions(logp: np.ndarray, old: np.ndarray, adv: float, obj: Objective) -> tuple[np.ndarray, np.ndarray]:
    """Per-token 0/1: clipped at the low end (adv < 0, ratio < 1 - eps_low) and at the high end
    (adv > 0, ratio > 1 + eps_high; CISPO, whose weight is capped above only: ratio > 1 + eps_high
    whatever the advantage's sign). TRL's ``clip_ratio/low_mean`` and ``high_mean``: which side
    of the trust region the updates hit tells whether eps_low or eps_high binds. Dual-clip's cap
    counts in ``clip_fraction`` only."""
    ratio = _ratio(logp, old, obj)
    high = ratio > 1.0 + obj.clip_eps_high
    if obj.policy_loss in ("sapo", "vespo"):  # soft weights: no clip region
        return np.zeros(len(ratio)), np.zeros(len(ratio))
    if obj.policy_loss == "cispo":
        return np.zeros(len(ratio)), high.astype(np.float64)
    low = (adv < 0) & (ratio < 1.0 - obj.clip_eps_low)
    return low.astype(np.float64), ((adv > 0) & high).astype(np.float64)


def mismatch_metrics(
    trainer_logprobs: Sequence[np.ndarray], sampler_logprobs: Sequence[np.ndarray], obj: Objective
) -> dict[str, float]:
    """The sampler-trainer gap ``delta = trainer - sampler`` per token: ``mismatch_abs`` (mean
    |delta|), ``mismatch_abs_max`` (its largest), ``mismatch_kl`` (k3 estimate of KL(sampler ||
    trainer) from the sampler's own samples), ``mismatch_over`` (share with |delta| >
    ``MISMATCH_THRESHOLD``), ``mismatch_unscored`` (share of tokens the sampler could not score:
    NaN log-prob) and ``mismatch_corrected`` (share whose correction weight the cap changed).

    An unscored token has no gap: it is left out of abs, abs_max, kl and over (their means are
    over the scored tokens; 0 when none is), as TRL leaves it out of
    ``sampling/sampling_logp_difference``; else one NaN made them all NaN. The correction weighs it
    1 (``mismatch_weights``), so it stays in ``mismatch_corrected``'s count.

    With a correction on, also ``mismatch_ratio_min``, ``_mean`` and ``_max``: TRL's
    ``sampling/importance_sampling_ratio``, the weight the correction applies after its cap, over
    the tokens (token level: an unscored token's is 1, as TRL's) or one per sequence with tokens
    (sequence level); 0 when there is none, as TRL logs then."""
    abs_sum = kl_sum = over_sum = corrected_sum = 0.0
    abs_max = 0.0
    n = unscored = 0
    ratios: list[np.ndarray] = []
    for t, s in zip(trainer_logprobs, sampler_logprobs):
        t, s = np.asarray(t, np.float64), np.asarray(s, np.float64)
        scored = ~np.isnan(s)
        d = (t - s)[scored]
        abs_sum += float(np.abs(d).sum())
        abs_max = max(abs_max, float(np.abs(d).max()) if d.size else 0.0)
        kl_sum += float((np.exp(d) - d - 1.0).sum())
        over_sum += float((np.abs(d) > MISMATCH_THRESHOLD).sum())
        weights, corrected = mismatch_weights(t, s, obj)
        corrected_sum += float(corrected.sum())
        ratios.append(weights[:1] if obj.mismatch_level == "sequence" else weights)
        n += len(t)
        unscored += int((~scored).sum())
    n_scored = max(n - unscored, 1)
    out = {"mismatch_abs": abs_sum / n_scored, "mismatch_abs_max": abs_max, "mismatch_kl": kl_sum / n_scored,
           "mismatch_over": over_sum / n_scored, "mismatch_corrected": corrected_sum / max(n, 1),
           "mismatch_unscored": unscored / max(n, 1)}
    if obj.corrects_mismatch:
        flat = np.concatenate(ratios) if ratios else np.zeros(0)
        out.update(mismatch_ratio_min=float(flat.min()) if flat.size else 0.0,
                   mismatch_ratio_mean=float(flat.mean()) if flat.size else 0.0,
                   mismatch_ratio_max=float(flat.max()) if flat.size else 0.0)
    return out


def token_weights(lengths: Sequence[int], obj: Objective, num_sequences: int | None = None,
                  num_tokens: float | None = None) -> list[np.ndarray]:
    """The factor each token's loss is multiplied by in the aggregated loss.

    ``num_sequences`` / ``num_tokens`` are the counts the aggregation divides by when they are
    more than these sequences (``TrainBatch.normaliser_sequences`` / ``normaliser_tokens``: rows
    TRL keeps in its batch with nothing to train; a mini-batch's fractional share of its step's
    tokens); None means ``len(lengths)`` / ``sum(lengths)``."""
    n_seq = len(lengths) if num_sequences is None else num_sequences
    total = float(sum(lengths)) if num_tokens is None else float(num_tokens)
    total = total if total > 0 else 1.0  # nothing to divide: no token weighs anything anyway
    out = []
    for n in lengths:
        if obj.loss_aggregation == "seq_mean_token_mean":
            w = 1.0 / (n_seq * max(n, 1))
        elif obj.loss_aggregation == "token_mean":
            w = 1.0 / total
        elif obj.loss_aggregation == "seq_mean_token_sum":  # LUSPO: a sequence weighs its length
            w = 1.0 / n_seq
        else:  # seq_mean_token_sum_norm
            w = 1.0 / (n_seq * obj.max_completion_length)
        out.append(np.full(n, w, dtype=np.float64))
    return out


def entropy_selection(entropies: Sequence[np.ndarray] | None, obj: Objective) -> list[np.ndarray] | None:
    """Per-token 0/1: entropy at least the batch's (1 - q) quantile (numpy's linear
    interpolation, as ``torch.quantile``); None when every token is kept."""
    if obj.top_entropy_quantile >= 1.0:
        return None
    if entropies is None:
        raise ValueError("top_entropy_quantile < 1 needs the trainer's token entropies")
    flat = np.concatenate([np.asarray(e, np.float64) for e in entropies]) if len(entropies) else np.zeros(0)
    if not flat.size:
        return [np.zeros(0) for _ in entropies]
    threshold = np.quantile(flat, 1.0 - obj.top_entropy_quantile)
    return [(np.asarray(e, np.float64) >= threshold).astype(np.float64) for e in entropies]


def entropy_grad(lengths: Sequence[int], obj: Objective,
                 masks: Sequence[np.ndarray] | None = None, *, num_sequences: int | None = None,
                 num_tokens: float | None = None) -> list[np.ndarray]:
    """d loss / d entropy per token (the bonus is linear in each token's entropy; 0 on
    masked-out tokens)."""
    kept = lengths if masks is None else [int(np.asarray(m, dtype=bool).sum()) for m in masks]
    weights = token_weights(kept, obj, num_sequences, num_tokens)
    return _unmask([-obj.entropy_coef * w for w in weights], masks, lengths)


def _masked(arrays, masks):
    """Each array restricted to its mask's True positions (the tokens the loss sees)."""
    if arrays is None or masks is None:
        return arrays
    return [np.asarray(a)[np.asarray(m, dtype=bool)] for a, m in zip(arrays, masks)]


def _inputs(logprobs, old_logprobs, ref_logprobs, sampler_logprobs, entropies, masks, objective: Objective,
            num_sequences: int | None, num_tokens: float | None):
    """float64 copies of the log-probs, and the entropies as given, each restricted to the
    masked-in tokens when ``masks`` is given; then every kept token's weight (``token_weights``):
    what ``policy_loss`` and ``policy_loss_grad`` both start from, so a loss and its gradient
    always see the same tokens, weighted alike.

    A mask (multi-turn episodes) is applied first, so every rule of the objective (the ratio,
    GSPO's sequence mean, the aggregation's token counts, the entropy quantile) sees the sampled
    tokens alone, exactly as if the inserted ones were part of the prompt."""
    def kept(arrays):
        return None if arrays is None else _masked([np.asarray(x, dtype=np.float64) for x in arrays], masks)

    logp = kept(logprobs)
    old = logp if old_logprobs is None else kept(old_logprobs)
    ref, sampler, entropies = kept(ref_logprobs), kept(sampler_logprobs), _masked(entropies, masks)
    weights = token_weights([len(x) for x in logp], objective, num_sequences, num_tokens)
    return logp, old, ref, sampler, entropies, weights


def _unmask(grads: list[np.ndarray], masks, lengths: Sequence[int]) -> list[np.ndarray]:
    """Per-token gradients back on the full completions (0 on masked-out tokens)."""
    if masks is None:
        return grads
    out = []
    for g, m, n in zip(grads, masks, lengths):
        full = np.zeros(n, dtype=np.float64)
        full[np.asarray(m, dtype=bool)] = g
        out.append(full)
    return out


def policy_loss(
    logprobs: Sequence[np.ndarray],
    advantages: Sequence[float],
    objective: Objective,
    old_logprobs: Sequence[np.ndarray] | None = None,
    ref_logprobs: Sequence[np.ndarray] | None = None,
    sampler_logprobs: Sequence[np.ndarray] | None = None,
    entropies: Sequence[np.ndarray] | None = None,
    masks: Sequence[np.ndarray] | None = None,
    *,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
) -> tuple[float, dict[str, float]]:
    """The batch loss and its metrics (``kl``, ``clip_fraction``, ``clip_low_fraction`` and
    ``clip_high_fraction`` (``clip_regions``) are token means, ``clip_low_min`` and
    ``clip_high_max`` the extremes of one completion's low / high fraction; with
    ``sampler_logprobs`` also the ``mismatch_*`` ones of ``mismatch_metrics``; with
    ``entropies``, the trainer's per-token entropies, ``entropy`` and ``entropy_selected``; with
    ``off_policy_mask_threshold``, ``off_policy_masked_fraction``: the share of sequences dropped).

    ``old_logprobs`` None means old == current (detached), as in a single-iteration step.
    ``masks`` (one bool array per sequence, multi-turn episodes) leaves the False tokens out of
    everything: loss, aggregation counts and metrics (``TokenSequence.mask``).
    ``num_sequences`` / ``num_tokens``: the aggregation's divisors when more rows count than are
    given (``token_weights``; ``TrainBatch.loss_counts``); the metrics stay means over these tokens.
    """
    logp, old, ref, sampler, entropies, weights = _inputs(
        logprobs, old_logprobs, ref_logprobs, sampler_logprobs, entropies, masks, objective, num_sequences, num_tokens)
    if objective.entropy_coef and entropies is None:
        raise ValueError("entropy_coef needs the trainer's token entropies")
    selected = entropy_selection(entropies, objective)
    total, kl_sum, clip_sum, n_tokens = 0.0, 0.0, 0.0, 0
    low_sum = high_sum = 0.0
    low_shares, high_shares = [], []  # each completion's clipped fractions (TRL's low_min, high_max)
    for i, lp in enumerate(logp):
        loss, _, _, kl, clipped = _token_terms(
            lp, old[i], None if ref is None else ref[i], None if sampler is None else sampler[i],
            float(advantages[i]), objective, None if selected is None else selected[i],
            None if entropies is None else np.asarray(entropies[i], np.float64),
        )
        total += float(np.sum(loss * weights[i]))
        kl_sum += float(kl.sum())
        clip_sum += float(clipped.sum())
        low, high = clip_regions(lp, old[i], float(advantages[i]), objective)
        low_sum, high_sum = low_sum + float(low.sum()), high_sum + float(high.sum())
        if len(lp):
            low_shares.append(float(low.mean()))
            high_shares.append(float(high.mean()))
        n_tokens += len(lp)
    denom = max(n_tokens, 1)
    metrics = {"kl": kl_sum / denom, "clip_fraction": clip_sum / denom, "tokens": n_tokens,
               "clip_low_fraction": low_sum / denom, "clip_high_fraction": high_sum / denom}
    if low_shares:
        metrics.update(clip_low_min=min(low_shares), clip_high_max=max(high_shares))
    if sampler is not None:
        metrics.update(mismatch_metrics(old, sampler, objective))
    if objective.off_policy_mask_threshold is not None:  # the share of sequences whose policy term was dropped
        dropped = sum(1.0 - off_policy_keep(lp, old[i], None if sampler is None else sampler[i],
                                            float(advantages[i]), objective) for i, lp in enumerate(logp))
        metrics["off_policy_masked_fraction"] = dropped / max(len(logp), 1)
    if entropies is not None:
        metrics["entropy"] = float(sum(np.sum(e) for e in entropies)) / denom
        metrics["entropy_selected"] = 1.0 if selected is None else float(sum(x.sum() for x in selected)) / denom
    return total, metrics


def policy_loss_grad(
    logprobs: Sequence[np.ndarray],
    advantages: Sequence[float],
    objective: Objective,
    old_logprobs: Sequence[np.ndarray] | None = None,
    ref_logprobs: Sequence[np.ndarray] | None = None,
    sampler_logprobs: Sequence[np.ndarray] | None = None,
    entropies: Sequence[np.ndarray] | None = None,
    masks: Sequence[np.ndarray] | None = None,
    *,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
) -> list[np.ndarray]:
    """d loss / d logprobs, one array per sequence (old/ref/sampler log-probs are constants; the
    entropy bonus depends on the entropies, not on these log-probs: see ``entropy_grad``).
    Masked-out tokens (``masks``) get a zero gradient; ``num_sequences`` / ``num_tokens`` as in
    ``policy_loss``."""
    lengths = [len(x) for x in logprobs]
    logp, old, ref, sampler, entropies, weights = _inputs(
        logprobs, old_logprobs, ref_logprobs, sampler_logprobs, entropies, masks, objective, num_sequences, num_tokens)
    selected = entropy_selection(entropies, objective)
    grads = []
    for i, lp in enumerate(logp):
        _, policy_grad, kl_grad, _, _ = _token_terms(
            lp, old[i], None if ref is None else ref[i], None if sampler is None else sampler[i],
            float(advantages[i]), objective, None if selected is None else selected[i],
        )
        grads.append(_spread(policy_grad * weights[i], objective) + kl_grad * weights[i])
    return _unmask(grads, masks, lengths)
