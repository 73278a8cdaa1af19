"""``train_step``: the clipped-surrogate objective of ``polyrl.algorithms`` on an MLX model.

The loss math lives in ``objective_loss`` alone, written to match
``polyrl.algorithms.reference.policy_loss`` (value) and ``policy_loss_grad`` (gradient w.r.t. the
per-token log-probs), so tests check it without a model. It works on the *flat* layout (all
completion tokens of a micro-batch concatenated, as ``scoring.flat_logprobs`` returns them) with a
per-token weight: the aggregation (``seq_mean_token_mean``, ``token_mean``,
``seq_mean_token_sum_norm``) is just that weight, computed from the *whole* batch's sequence and
token counts (``TrainBatch.loss_counts``: rows the trainer left out but TRL's aggregation counts
are in them). So with micro-batches (``OptimizerConfig.micro_batch_size``) the summed micro-batch
losses and gradients are exactly the full-batch loss and gradient.

Multi-turn episodes: a sequence's ``mask`` marks its sampled tokens. The forward scores every
completion token (inserted ones are context the next sampled token depends on), then only the
masked-in tokens' log-probs go into ``objective_loss``, so every rule (ratio, GSPO's sequence mean,
the aggregation's counts, the entropy quantile, the metrics) sees them alone, as the reference's
``masks`` prescribe, and an inserted token gets no gradient of its own.

The step: ``nn.value_and_grad`` per micro-batch, gradients summed, global-norm clipping
(``optim.clip_grad_norm``), one AdamW update. A non-finite loss or gradient norm leaves weights
and optimizer state untouched and reports ``skipped=True``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import MISMATCH_THRESHOLD, VESPO_LOG_MAX, VESPO_LOG_MIN
from polyrl.backend_kit.gap_metrics import RATIO_SUMS, SCORED_KEYS, gap_extremes, rank_gap
from polyrl.backend_kit.router_aux import refuse_router_aux
from polyrl.schedules import lr_at
from polyrl.types import StepMetrics, TokenSequence, TrainBatch

from polyrl_mlx._mx import mx, nn, optim
from polyrl_mlx.engine import MLXEngine
from polyrl_mlx.router_aux import COVERED_TYPES, router_aux_weight
from polyrl_mlx.scoring import flat_logprobs


def token_weights(lengths: Sequence[int], objective: Objective, num_sequences: int,
                  num_tokens: float) -> np.ndarray:
    """Each token's factor in the aggregated loss (flat), given the whole batch's counts."""
    out = []
    for n in lengths:
        if objective.loss_aggregation == "seq_mean_token_mean":
            w = 1.0 / (num_sequences * max(n, 1))
        elif objective.loss_aggregation == "token_mean":
            w = 1.0 / (num_tokens if num_tokens > 0 else 1.0)
        elif objective.loss_aggregation == "seq_mean_token_sum":  # LUSPO
            w = 1.0 / num_sequences
        else:  # seq_mean_token_sum_norm (Dr.GRPO)
            w = 1.0 / (num_sequences * objective.max_completion_length)
        out.append(np.full(n, w))
    return np.concatenate(out) if out else np.zeros(0)


def objective_loss(
    logp: mx.array,
    advantages: mx.array,
    weights: mx.array,
    objective: Objective,
    old_logp: mx.array | None = None,
    ref_logp: mx.array | None = None,
    *,
    sampler_logp: mx.array | None = None,
    segments: mx.array | None = None,
    stats: dict[str, mx.array] | None = None,
    entropy: mx.array | None = None,
) -> tuple[mx.array, mx.array, mx.array]:
    """(loss, kl_sum, clip_sum) over flat per-token arrays.

    ``segments`` (each token's sequence index) is needed by the sequence-level forms (GSPO's
    ratio, sequence-level mismatch correction). ``stats`` (a dict, if given) receives the
    ``clip_low_fraction``/``clip_high_fraction`` token sums (``reference.clip_regions``), with
    policy_loss "cispo" ``cispo_clip_fraction`` (TRL's cispo_clip_ratio count: capped with a
    positive advantage), with "vespo" ``vespo_phi_sum`` (its sequence weights' sum) and, with
    ``segments``, ``clip_low_min``/``clip_high_max`` (one sequence's extreme clipped share); with
    ``sampler_logp`` also the ``mismatch_*`` ones (see ``reference.mismatch_metrics``); with
    ``entropy`` (per token, differentiable) also ``entropy`` and ``entropy_selected`` sums (and with
    ``entropy_coef`` ``bonus_sum``, the bonus's share of the loss, for TRL's ``policy_loss``); with
    ``off_policy_mask_threshold``, ``off_policy_masked``: the number of sequences dropped.

    ``advantages`` and ``weights`` are per token (a sequence's advantage repeated over its
    tokens); ``old_logp=None`` means the detached ``logp`` (ratio 1, gradient intact). The math
    runs in ``logp``'s dtype (pass float64 on CPU to compare with the numpy reference).
    """
    dtype = logp.dtype
    adv = advantages.astype(dtype)
    old = mx.stop_gradient(logp) if old_logp is None else old_logp.astype(dtype)
    log_ratio = logp - old
    if objective.importance_sampling_level == "sequence":  # GSPO: exp(mean log ratio), per sequence
        if segments is None:
            raise ValueError("sequence-level importance sampling needs the per-token sequence index")
        ratio = mx.exp(_segment_mean(log_ratio, segments))
    else:
        ratio = mx.exp(log_ratio)
    low, high = 1.0 - objective.clip_eps_low, 1.0 + objective.clip_eps_high
    r = mx.stop_gradient(ratio)
    if sampler_logp is not None:  # the trainer's behaviour log-probs vs the sampler's, constants
        delta = mx.stop_gradient(old) - sampler_logp.astype(dtype)
        weight, corrected = _mismatch_weights(delta, segments, objective)
    elif objective.corrects_mismatch:
        raise ValueError("mismatch_correction needs the sampler's log-probs (TrainBatch.sampler_logprobs)")
    if objective.policy_loss == "cispo":  # clipped, detached weight on a REINFORCE term
        loss = -adv * mx.minimum(r, high) * logp
        clipped = clipped_high = r > high
        clipped_low = mx.zeros(r.shape, dtype=mx.bool_)  # CISPO's weight is capped above only
    elif objective.policy_loss == "sapo":  # a sigmoid gate instead of the clip
        tau = mx.where(adv > 0, mx.array(objective.sapo_temperature_pos, dtype=dtype),
                       mx.array(objective.sapo_temperature_neg, dtype=dtype))
        loss = -adv * mx.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
        clipped = clipped_low = clipped_high = mx.zeros(r.shape, dtype=mx.bool_)
    elif objective.policy_loss == "vespo":  # detached sequence weight on a REINFORCE term
        if segments is None:
            raise ValueError("vespo's sequence weight needs the per-token sequence index")
        folded = weight if objective.corrects_mismatch else None
        phi = _vespo_weight(mx.stop_gradient(log_ratio), segments, adv, objective, folded)
        loss = -adv * phi * logp
        clipped = clipped_low = clipped_high = mx.zeros(r.shape, dtype=mx.bool_)
    else:
        unclipped = -adv * ratio
        clipped_loss = mx.stop_gradient(-adv * mx.clip(ratio, low, high))
        # where the clipped branch is the larger one it is flat: slope 0, as in the reference
        loss = mx.where(unclipped >= clipped_loss, unclipped, clipped_loss)
        clipped_low, clipped_high = (adv < 0) & (r < low), (adv > 0) & (r > high)
        clipped = clipped_low | clipped_high
        if objective.dual_clip is not None:
            cap = -adv * objective.dual_clip
            dual = (adv < 0) & (mx.stop_gradient(loss) > cap)
            loss = mx.where(dual, cap, loss)
            clipped = clipped | dual
    # which side of the trust region binds (reference.clip_regions); dual-clip counts in clipped only
    extras: dict[str, mx.array] = {"clip_low_fraction": clipped_low.astype(dtype).sum(),
                                   "clip_high_fraction": clipped_high.astype(dtype).sum()}
    if objective.policy_loss == "cispo":  # TRL's cispo_clip_ratio: capped with a positive advantage only
        extras["cispo_clip_fraction"] = (clipped_high & (adv > 0)).astype(dtype).sum()
    if objective.policy_loss == "vespo":  # its sequences' weights summed: TRL's vespo/phi_seq_mean x sequences
        extras["vespo_phi_sum"] = _per_sequence_sum(phi, segments)
    if segments is not None:  # each sequence's clipped shares: TRL's clip_ratio/low_min and high_max
        slots = segments.shape[0]  # at least the sequences; a slot without a token is left out
        count = mx.zeros(slots, dtype=dtype).at[segments].add(mx.ones(segments.shape, dtype=dtype))
        has = count > 0
        low_share = mx.zeros(slots, dtype=dtype).at[segments].add(clipped_low.astype(dtype)) / mx.maximum(count, 1)
        high_share = mx.zeros(slots, dtype=dtype).at[segments].add(clipped_high.astype(dtype)) / mx.maximum(count, 1)
        extras["clip_low_min"] = mx.min(mx.where(has, low_share, math.inf))
        extras["clip_high_max"] = mx.max(mx.where(has, high_share, -math.inf))
    if objective.off_policy_mask_threshold is not None:  # the policy term only: not the KL, not the bonus
        if segments is None:
            raise ValueError("off-policy sequence masking needs the per-token sequence index")
        behaviour = old if sampler_logp is None else sampler_logp.astype(dtype)
        keep = _off_policy_keep(logp, behaviour, segments, adv, objective)
        loss = loss * keep
        # the sequences dropped (a sequence's tokens share its keep; a slot without tokens is none)
        slots = segments.shape[0]
        extras["off_policy_masked"] = (mx.zeros(slots, dtype=dtype).at[segments].add(1.0 - keep) > 0).astype(
            dtype).sum()
    if sampler_logp is not None:
        if objective.corrects_mismatch and objective.policy_loss != "vespo":  # vespo folded it in
            loss = loss * weight
        extras |= _mismatch_stats(delta, corrected, segments, objective)
    if objective.needs_entropy and entropy is None:
        raise ValueError("entropy_coef / top_entropy_quantile need the trainer's token entropies")
    if entropy is not None:
        ent = entropy.astype(dtype)
        if objective.entropy_coef == 0:
            ent = mx.stop_gradient(ent)
        selected = mx.ones(ent.shape, dtype=mx.bool_)
        if objective.top_entropy_quantile < 1.0 and ent.size:  # policy term on high-entropy tokens
            threshold = _quantile(mx.stop_gradient(ent), 1.0 - objective.top_entropy_quantile)
            selected = mx.stop_gradient(ent) >= threshold
            loss = mx.where(selected, loss, mx.zeros_like(loss))
        if objective.entropy_coef:
            loss = loss - objective.entropy_coef * ent
        extras["entropy"] = mx.stop_gradient(ent).sum()
        extras["entropy_selected"] = selected.astype(dtype).sum()
    kl = mx.zeros_like(logp)
    if objective.beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs reference log-probs (TrainBatch.ref_logprobs)")
        delta = ref_logp.astype(dtype) - logp
        if objective.kl_estimator == "k1":
            kl = -delta
        elif objective.kl_estimator == "k2":
            kl = 0.5 * delta * delta
        else:  # k3, Schulman's unbiased non-negative estimator
            kl = mx.exp(delta) - delta - 1.0
        if objective.kl_bias_correction:  # TRL's use_bias_correction_kl: times the ratio, not detached
            kl = kl * ratio
        loss = loss + objective.beta * kl
    total = (loss * weights.astype(dtype)).sum()
    if entropy is not None and objective.entropy_coef:  # the bonus's share of total: TRL's policy_loss is total - it
        extras["bonus_sum"] = (-objective.entropy_coef * mx.stop_gradient(ent) * weights.astype(dtype)).sum()
    if stats is not None:
        stats.update(extras)
    return total, mx.stop_gradient(kl).sum(), clipped.astype(dtype).sum()


def _mismatch_stats(delta: mx.array, corrected: mx.array, segments: mx.array | None,
                    objective: Objective) -> dict[str, mx.array]:
    """The sampler-trainer gap's sums and extremes (``reference.mismatch_metrics``): a token the
    sampler could not score (NaN) counts in ``mismatch_unscored`` and is left out of the gap's
    sums and max (TRL's ``sampling_logp_difference``); with a correction on, the applied weights'
    sum, count, min and max (TRL's ``importance_sampling_ratio``: per token, or per sequence at
    sequence level; min inf and max -inf when there is none)."""
    dtype = delta.dtype
    scored = ~mx.isnan(delta)
    gap = mx.where(scored, delta, mx.zeros_like(delta))
    out = {
        "mismatch_abs": mx.abs(gap).sum(),
        # the gaps are often ~1e-7, where float32 exp(d) - d - 1 is all rounding: the series there
        "mismatch_kl": mx.where(mx.abs(gap) < 1e-3, gap * gap * (0.5 + gap / 6.0), mx.exp(gap) - gap - 1.0).sum(),
        "mismatch_over": (mx.abs(gap) > MISMATCH_THRESHOLD).astype(dtype).sum(),
        "mismatch_corrected": corrected.astype(dtype).sum(),
        "mismatch_unscored": (~scored).astype(dtype).sum(),
        "mismatch_abs_max": mx.abs(gap).max() if gap.size else mx.array(0.0, dtype=dtype),
    }
    if objective.corrects_mismatch:
        if objective.mismatch_level == "sequence":  # one weight per sequence that has tokens
            if segments is None:
                raise ValueError("sequence-level mismatch correction needs the per-token sequence index")
            slots = segments.shape[0]
            sums = mx.zeros(slots, dtype=dtype).at[segments].add(gap)
            has = mx.zeros(slots, dtype=dtype).at[segments].add(mx.ones(segments.shape, dtype=dtype)) > 0
        else:  # per token; an unscored one's gap is 0: weight 1, as the loss applies it
            sums, has = gap, mx.ones(gap.shape, dtype=mx.bool_)
        ratios = _capped(mx.exp(sums), objective)[0]
        out |= {"mismatch_ratio_sum": mx.where(has, ratios, 0.0).sum(),
                "mismatch_ratio_count": has.astype(dtype).sum(),
                "mismatch_ratio_min": mx.min(mx.where(has, ratios, math.inf)) if ratios.size else mx.array(math.inf),
                "mismatch_ratio_max": mx.max(mx.where(has, ratios, -math.inf)) if ratios.size else mx.array(-math.inf)}
    return out


def _quantile(values: mx.array, q: float) -> mx.array:
    """Linear-interpolation quantile of a flat array (numpy's and torch's default)."""
    ordered = mx.sort(values)
    pos = (values.size - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _segment_sum(values: mx.array, segments: mx.array) -> mx.array:
    """Each token's sequence sum of ``values`` (flat layout; ``segments`` = sequence index)."""
    n_seq = int(segments.max().item()) + 1 if segments.size else 0
    onehot = (segments[:, None] == mx.arange(n_seq)[None, :]).astype(values.dtype)  # [tokens, seqs]
    return (onehot * (values[:, None] * onehot).sum(axis=0)[None, :]).sum(axis=1)


def _off_policy_keep(logp: mx.array, behaviour: mx.array, segments: mx.array, adv: mx.array,
                     objective: Objective) -> mx.array:
    """DeepSeek-V3.2's off-policy sequence mask per token (``reference.off_policy_keep``): 0 drops a
    negative-advantage sequence whose mean ``behaviour - logp`` (NaN as 0) exceeds the threshold."""
    gap = mx.stop_gradient(behaviour - logp)
    gap = mx.where(mx.isnan(gap), mx.zeros_like(gap), gap)
    mean = _segment_mean(gap, segments)
    keep = (adv >= 0) | (mean <= float(objective.off_policy_mask_threshold or 0.0))
    return mx.stop_gradient(keep.astype(logp.dtype))


def _vespo_weight(log_ratio: mx.array, segments: mx.array, adv: mx.array, objective: Objective,
                  correction: mx.array | None) -> mx.array:
    """VESPO's detached sequence weight, per token (``reference.vespo_weight``)."""
    log_w = _segment_sum(mx.clip(log_ratio, -VESPO_LOG_MAX, VESPO_LOG_MAX), segments)
    if correction is not None:  # the mismatch correction's token weights, folded in (as TRL)
        log_w = log_w + _segment_sum(mx.clip(mx.log(correction), VESPO_LOG_MIN, VESPO_LOG_MAX), segments)
    log_w = mx.clip(log_w, VESPO_LOG_MIN, VESPO_LOG_MAX)
    nonneg = adv >= 0
    dtype = log_w.dtype
    k = mx.where(nonneg, mx.array(objective.vespo_k_pos, dtype=dtype), mx.array(objective.vespo_k_neg, dtype=dtype))
    lam = mx.where(nonneg, mx.array(max(objective.vespo_lambda_pos, 1e-4), dtype=dtype),
                   mx.array(max(objective.vespo_lambda_neg, 1e-4), dtype=dtype))
    phi = mx.exp(lam + k * log_w - lam * mx.exp(log_w))
    return mx.stop_gradient(mx.where(mx.isfinite(phi), phi, mx.zeros_like(phi)))


def _per_sequence_sum(per_token: mx.array, segments: mx.array) -> mx.array:
    """The sum over sequences of a value every token of a sequence holds alike (its mean over the
    sequence's tokens, summed): VESPO's weight, one per sequence, laid out per token here."""
    slots = segments.shape[0]
    count = mx.zeros(slots, dtype=per_token.dtype).at[segments].add(mx.ones(segments.shape, dtype=per_token.dtype))
    total = mx.zeros(slots, dtype=per_token.dtype).at[segments].add(per_token)
    return (total / mx.maximum(count, 1)).sum()


def _segment_mean(values: mx.array, segments: mx.array) -> mx.array:
    """Each token's sequence mean of ``values`` (flat layout; ``segments`` = sequence index)."""
    n_seq = int(segments.max().item()) + 1 if segments.size else 0
    onehot = (segments[:, None] == mx.arange(n_seq)[None, :]).astype(values.dtype)  # [tokens, seqs]
    sums = (values[:, None] * onehot).sum(axis=0)
    counts = mx.maximum(onehot.sum(axis=0), 1.0)
    return (onehot * (sums / counts)[None, :]).sum(axis=1)


def _mismatch_weights(delta: mx.array, segments: mx.array | None,
                      objective: Objective) -> tuple[mx.array, mx.array]:
    """TIS/MIS correction weight per token (detached) and where the cap changed it; a token the
    sampler could not score (NaN) gets none (``reference.mismatch_weights``)."""
    delta = mx.where(mx.isnan(delta), mx.zeros_like(delta), delta)
    if objective.mismatch_level == "sequence":
        if segments is None:
            raise ValueError("sequence-level mismatch correction needs the per-token sequence index")
        n_seq = int(segments.max().item()) + 1 if segments.size else 0
        onehot = (segments[:, None] == mx.arange(n_seq)[None, :]).astype(delta.dtype)
        delta = (onehot * (delta[:, None] * onehot).sum(axis=0)[None, :]).sum(axis=1)
    return _capped(mx.exp(delta), objective)


def _capped(w: mx.array, objective: Objective) -> tuple[mx.array, mx.array]:
    """Raw ratios after the correction's cap and where the cap changed them
    (``reference.capped_weights``)."""
    over = w > objective.mismatch_cap
    if objective.mismatch_correction == "tis":
        return mx.minimum(w, objective.mismatch_cap), over
    if objective.mismatch_correction == "mis":
        return mx.where(over, mx.zeros_like(w), w), over
    return mx.ones_like(w), mx.zeros_like(over)


def kept_tokens(sequences: Sequence[TokenSequence]) -> mx.array | None:
    """Flat indices of the completion tokens the loss sees (``TokenSequence.mask`` True), or
    None when no sequence is masked (every token counts, nothing to gather)."""
    if all(s.mask is None for s in sequences):
        return None
    flat = np.concatenate([s.loss_mask for s in sequences]) if sequences else np.zeros(0, bool)
    return mx.array(np.flatnonzero(flat).astype(np.int32))


def _flat(values: list[np.ndarray] | None, idx: range, keep: mx.array | None = None) -> mx.array | None:
    """Per-sequence arrays of ``idx`` concatenated (the flat layout), restricted to ``keep``."""
    if values is None:
        return None
    parts = [np.asarray(values[i], dtype=np.float32).reshape(-1) for i in idx]
    out = mx.array(np.concatenate(parts) if parts else np.zeros(0, np.float32))
    return out if keep is None else out[keep]


def _tree_add(a, b):
    from mlx.utils import tree_map

    return b if a is None else tree_map(lambda x, y: x + y, a, b)


def _global_norm(grads) -> mx.array:
    from mlx.utils import tree_flatten

    leaves = [g for _, g in tree_flatten(grads)]
    if not leaves:
        return mx.array(0.0)
    return mx.sqrt(sum((g.astype(mx.float32) ** 2).sum() for g in leaves))


def accumulate_gradients(engine: MLXEngine, batch: TrainBatch, objective: Objective,
                         micro_batch_size: int | None = None, aux_coef: float = 0.0) -> tuple[Any, dict[str, float]]:
    """Summed gradients of the batch loss (trainable parameters) and the loss sums.

    Micro-batches of ``micro_batch_size`` sequences (default: the engine's
    ``OptimizerConfig.micro_batch_size``, else the whole batch) each contribute their tokens'
    share of the whole-batch loss, so the sum is the full-batch gradient. Stops early (returns
    ``finite=0``) at the first non-finite micro-batch loss. ``aux_coef`` (a MoE model's router
    load-balancing loss weight): each micro-batch's loss also gets ``aux_coef x`` its router loss
    over its rows' real tokens divided by the micro-batches (TRL: / gradient accumulation steps, as
    the torch backend), the router losses summed in ``aux``.
    """
    seqs, n = batch.sequences, len(batch.sequences)
    norm_n, norm_tokens = batch.loss_counts  # rows TRL keeps with nothing to train count too
    if objective.beta > 0 and batch.ref_logprobs is None:
        raise ValueError("objective.beta > 0 but the batch has no ref_logprobs")
    micro = micro_batch_size or engine.config.optimizer.micro_batch_size or max(n, 1)
    temperature = float(batch.temperature) or 1.0
    model = engine.model
    grads = None
    sums = {"loss": 0.0, "kl": 0.0, "clipped": 0.0, "finite": 1.0, **({"aux": 0.0} if aux_coef else {})}
    micros = max(1, len(range(0, n, micro)))  # the router term's divisor: every micro-batch, as torch's
    model.train()  # LoRA dropout (if any) on while differentiating
    try:
        for start in range(0, n, micro):
            idx = range(start, min(n, start + micro))
            chunk = [seqs[i] for i in idx]
            keep = kept_tokens(chunk)  # flat positions the loss sees (None: all of them)
            lengths = [int(s.loss_mask.sum()) for s in chunk]
            if objective.policy_loss == "vespo":  # a row with no token (a router term's prompt alone): its
                # log w is 0, its weight e^(lambda - lambda) = 1, counted as torch's and TRL's count it
                sums["vespo_phi_sum"] = sums.get("vespo_phi_sum", 0.0) + lengths.count(0)
            if sum(lengths) == 0 and not aux_coef:  # torch's router term counts such a micro-batch too
                continue
            adv = mx.array(np.repeat(np.asarray(batch.advantages[start:idx.stop], np.float32), lengths))
            weights = mx.array(token_weights(lengths, objective, norm_n, norm_tokens).astype(np.float32))
            old = _flat(batch.old_logprobs, idx, keep)
            ref = _flat(batch.ref_logprobs, idx, keep) if objective.beta > 0 else None
            sampler = _flat(batch.sampler_logprobs, idx, keep)
            segments = mx.array(np.repeat(np.arange(len(lengths)), lengths))

            def loss_fn(chunk=chunk, adv=adv, weights=weights, old=old, ref=ref, sampler=sampler,
                        segments=segments, keep=keep) -> tuple[Any, ...]:
                entropy: list[mx.array] = []
                router: list[mx.array] | None = [] if aux_coef else None
                logp, _ = flat_logprobs(engine, chunk, temperature, entropy=entropy, router=router)
                ent = entropy[0]
                if keep is not None:  # inserted tokens are context only: out of every rule
                    logp, ent = logp[keep], ent[keep]
                mismatch: dict[str, mx.array] = {}
                if logp.size:
                    total, *rest = objective_loss(logp, adv, weights, objective, old, ref, sampler_logp=sampler,
                                                  segments=segments, stats=mismatch, entropy=ent)
                else:  # no token to train (all masked out): the router term alone, as torch's
                    total, rest = mx.array(0.0), [mx.array(0.0), mx.array(0.0)]
                if router:  # TRL's loss + coef x aux / accumulation steps
                    total = total + aux_coef * router[0] / micros
                    mismatch["aux"] = mx.stop_gradient(router[0])
                return (total, *rest, mismatch)  # aux outputs: only the first is differentiated

            (loss, kl, clipped, mismatch), g = nn.value_and_grad(model, loss_fn)()
            grads = _tree_add(grads, g)
            mx.eval(loss, kl, clipped, grads, *mismatch.values())
            for key, value in mismatch.items():
                if key in EXTREMES:  # over the micro-batches' sequences, not summed
                    sums[key] = EXTREMES[key](sums.get(key, value.item()), value.item())
                else:
                    sums[key] = sums.get(key, 0.0) + value.item()
            sums["loss"] += loss.item()
            sums["kl"] += kl.item()
            sums["clipped"] += clipped.item()
            if not math.isfinite(sums["loss"]):
                sums["finite"] = 0.0
                break
    finally:
        model.eval()
    if aux_coef:
        sums["micros"] = float(micros)
    return grads, sums


#: stats taken as the extreme over the batch's sequences or tokens (TRL's clip_ratio/low_min and
#: high_max, sampling/sampling_logp_difference/max, sampling/importance_sampling_ratio/min and max)
EXTREMES: dict[str, Callable[[float, float], float]] = {
    "clip_low_min": min, "clip_high_max": max, "mismatch_abs_max": max, "mismatch_ratio_min": min,
    "mismatch_ratio_max": max}


def train_step(engine: MLXEngine, batch: TrainBatch, objective: Objective) -> StepMetrics:
    """One optimizer step on ``batch``; see the module docstring."""
    optimizer = engine.require_optimizer()
    if engine.model_type not in COVERED_TYPES:  # a MoE family whose router is not read here
        refuse_router_aux(engine.hf_config, objective.router_aux_loss_coef, "mlx")
    aux_coef = router_aux_weight(engine, objective)
    total_tokens = batch.num_tokens
    if not batch.sequences or (total_tokens == 0 and not aux_coef):  # a router term trains prompt-only rows too
        return StepMetrics(loss=0.0, grad_norm=0.0, tokens=total_tokens, skipped=True)
    with mx.stream(engine.device):
        grads, sums = accumulate_gradients(engine, batch, objective, aux_coef=aux_coef)
        finite = bool(sums["finite"])
        grad_norm = float("nan")
        if finite and grads is not None:
            max_norm = engine.config.optimizer.max_grad_norm
            if max_norm is not None:
                grads, norm = optim.clip_grad_norm(grads, max_norm)
            else:
                norm = _global_norm(grads)
            grad_norm = float(norm.item())
            finite = math.isfinite(grad_norm)
        skipped = not finite or grads is None
        lr = apply_scheduled_lr(engine)
        if not skipped:
            optimizer.update(engine.model, grads)
            mx.eval(engine.model.parameters(), optimizer.state)

    denom = max(total_tokens, 1)
    scored = max(total_tokens - sums.get("mismatch_unscored", 0.0), 1.0)
    return StepMetrics(
        loss=sums["loss"], grad_norm=grad_norm, kl=sums["kl"] / denom,
        clip_fraction=sums["clipped"] / denom, tokens=total_tokens, skipped=skipped,
        extra={"lr": float(lr.item() if isinstance(lr, mx.array) else lr),
               **{k: v / (scored if k in SCORED_KEYS else denom) for k, v in sums.items()
                  if k.startswith(("mismatch_", "entropy", "clip_", "cispo_clip")) and k not in EXTREMES and k not in RATIO_SUMS},
               **{k: sums[k] for k in EXTREMES if k in sums and k.startswith("clip_")},
               **(gap_extremes(sums, sums, objective.corrects_mismatch) if batch.sampler_logprobs is not None else {}),
               **(rank_gap(sums, sums, total_tokens, objective.corrects_mismatch)  # one process: its own
                  if batch.sampler_logprobs is not None else {}),
               **({"off_policy_masked_fraction": sums.get("off_policy_masked", 0.0) / len(batch.sequences)}
                  if objective.off_policy_mask_threshold is not None else {}),
               **({"vespo_phi_seq_mean": sums.get("vespo_phi_sum", 0.0) / len(batch.sequences)}
                  if objective.policy_loss == "vespo" else {}),
               **({"aux_loss": sums["aux"] / sums["micros"]} if aux_coef else {}),
               # TRL's policy_loss: the loss without the entropy bonus and the router term (the KL term
               # in), logged where there is a bonus, as TRL logs it and the torch backend reports it
               **({"policy_loss": sums["loss"] - sums.get("bonus_sum", 0.0)
                   - (aux_coef * sums["aux"] / sums["micros"] if aux_coef else 0.0)}
                  if objective.entropy_coef and sums["finite"] else {})},
    )



def apply_scheduled_lr(engine: MLXEngine) -> float:
    """Set the optimizer's lr for the coming update from its own update counter (``step``, saved
    with the optimizer state, so a resumed run continues the schedule exactly) and return it;
    the formula is ``polyrl.schedules``' (the torch backend's too)."""
    optimizer = engine.require_optimizer()
    lr = lr_at(engine.config.optimizer, int(optimizer.step.item()))
    optimizer.learning_rate = lr
    return lr


__all__ = ["accumulate_gradients", "apply_scheduled_lr", "objective_loss", "token_weights", "train_step"]
