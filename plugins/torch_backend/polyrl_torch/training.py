"""``train_step``: the clipped-surrogate objective of ``polyrl.algorithms`` on a torch model.

The loss math lives in ``objective_loss`` alone, written to match
``polyrl.algorithms.reference.policy_loss`` (value) and ``policy_loss_grad`` (gradient w.r.t. the
per-token log-probs) exactly, so tests can check it without a model. ``train_step`` wraps it with
micro-batching: every micro-batch's loss is normalised by the *whole* batch's sequence and token
counts, so the accumulated gradient is the full-batch gradient (not a mean of micro-batch means);
those counts are ``TrainBatch.loss_counts``, which include rows the trainer left out of the batch
but TRL's aggregation counts (truncated and unscorable completions).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import MISMATCH_THRESHOLD, VESPO_LOG_MAX, VESPO_LOG_MIN
from polyrl.backend_kit.gap_metrics import RATIO_SUMS, SCORED_KEYS, gap_extremes, rank_gap
from polyrl.errors import ConfigError
from polyrl.types import StepMetrics, TrainBatch
from polyrl_torch import distributed
from polyrl_torch.devices import wait_for_device
from polyrl_torch.engine import TorchEngine
from polyrl_torch.schedule import apply_scheduled_lr
from polyrl_torch.router_aux import router_aux_weight
from polyrl_torch.scoring import token_logprobs_with_entropy, token_logprobs_with_router_loss

LogProbs = torch.Tensor | Sequence[torch.Tensor]
#: Token sums reported as means in ``StepMetrics.extra``: the sampler-trainer gap (with sampler
#: log-probs; abs, kl and over are means over the tokens the sampler scored, see
#: ``reference.mismatch_metrics``), the entropy (the trainer's forward).
SAMPLER_KEYS = ("mismatch_abs", "mismatch_kl", "mismatch_over", "mismatch_corrected", "mismatch_unscored")
ENTROPY_KEYS = ("entropy", "entropy_selected")
MISMATCH_KEYS = SAMPLER_KEYS + ENTROPY_KEYS
#: Token counts reported as fractions in ``StepMetrics.extra`` (TRL's clip_ratio/low_mean, high_mean;
#: ``cispo_clip``, TRL's cispo_clip_ratio, reported with policy_loss "cispo" only).
CLIP_REGION_KEYS = ("clip_low", "clip_high", "cispo_clip")


def masked_in(values: list[torch.Tensor] | None, masks: list[torch.Tensor] | None) -> list[torch.Tensor] | None:
    """Each sequence's values at its loss-mask's True positions: an episode's inserted tokens
    leave before the objective sees anything, so every rule (ratio, GSPO's mean, counts, entropy
    quantile) runs on the sampled tokens alone, as the reference's ``masks`` do; indexing keeps
    the graph, so the inserted tokens' log-probs get no gradient."""
    if values is None or masks is None:
        return values
    return [v[m] for v, m in zip(values, masks)]


def _padded(values: LogProbs | None, like: torch.Tensor) -> torch.Tensor | None:
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        return values.to(like.dtype)
    width = like.shape[1]
    out = like.new_zeros(like.shape)
    for i, v in enumerate(values):
        v = torch.as_tensor(v, dtype=like.dtype, device=like.device).reshape(-1)
        out[i, : min(len(v), width)] = v[:width]
    return out


def objective_loss(
    logp: LogProbs,
    advantages: torch.Tensor | Sequence[float],
    objective: Objective,
    old_logp: LogProbs | None = None,
    ref_logp: LogProbs | None = None,
    mask: torch.Tensor | None = None,
    *,
    sampler_logp: LogProbs | None = None,
    entropy: LogProbs | None = None,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The aggregated policy loss (scalar tensor) and detached sums ``kl_sum``, ``clip_sum``,
    ``clip_low_sum``, ``clip_high_sum`` (``reference.clip_regions``), ``cispo_clip_sum`` (TRL's
    cispo_clip_ratio count: capped with a positive advantage; 0 for other losses), ``tokens`` (and, with
    ``off_policy_mask_threshold``, ``off_policy_masked_sum``: the sequences dropped; with policy_loss
    "vespo", ``vespo_phi_sum``: its sequence weights' sum, TRL's ``vespo/phi_seq_mean`` x sequences).

    ``logp`` is a list of 1-D tensors (one per sequence) or a ``[B, T]`` tensor with ``mask``;
    ``old_logp``/``ref_logp``/``sampler_logp`` have the same layout and are constants; with
    ``sampler_logp`` the stats add ``mismatch_*_sum`` (see ``reference.mismatch_metrics``).
    ``entropy`` (same layout, differentiable when ``entropy_coef`` is set) adds ``entropy_sum``
    and ``entropy_selected_sum`` and drives ``entropy_coef`` / ``top_entropy_quantile``. ``old_logp=None`` means
    the detached ``logp`` (ratio 1, gradient intact). ``num_sequences``/``num_tokens`` are the
    counts of the whole batch when this call sees one micro-batch of it (default: this batch).
    Computation happens in ``logp``'s dtype (pass float64 to compare with the numpy reference).
    """
    if isinstance(logp, torch.Tensor):
        if mask is None:
            raise ValueError("a padded logp tensor needs its mask")
        lp = logp
        valid = mask.to(torch.bool)
    else:
        if not len(logp):
            raise ValueError("objective_loss needs at least one sequence")
        lengths = [len(x) for x in logp]
        width = max(lengths)
        lp = torch.stack([torch.cat([x.reshape(-1), x.new_zeros(width - len(x))]) for x in logp])
        valid = torch.arange(width, device=lp.device)[None, :] < torch.tensor(lengths, device=lp.device)[:, None]
    zero = lp.new_zeros(())
    lp = torch.where(valid, lp, zero)  # padding may hold -inf/NaN: never let it reach the math
    old = _padded(old_logp, lp)
    old = lp.detach() if old is None else torch.where(valid, old, zero)
    adv = torch.as_tensor(advantages, dtype=lp.dtype, device=lp.device).reshape(-1, 1)

    lengths_t = valid.sum(dim=1)
    log_ratio = torch.where(valid, lp - old, zero)
    if objective.importance_sampling_level == "sequence":  # GSPO: exp(mean log ratio), per sequence
        seq = log_ratio.sum(dim=1, keepdim=True) / lengths_t.clamp(min=1).to(lp.dtype)[:, None]
        ratio = torch.exp(seq).expand_as(lp)
    else:
        ratio = torch.exp(log_ratio)
    low, high = 1.0 - objective.clip_eps_low, 1.0 + objective.clip_eps_high
    sampler = _padded(sampler_logp, lp)
    if sampler is not None:  # the trainer's behaviour log-probs vs the sampler's, constants
        delta = torch.where(valid, old.detach() - sampler, zero)
        weight, corrected = _mismatch_weights(delta, valid, objective)
    elif objective.corrects_mismatch:
        raise ValueError("mismatch_correction needs the sampler's log-probs (TrainBatch.sampler_logprobs)")
    cispo_clip = torch.zeros_like(valid)
    if objective.policy_loss == "cispo":  # clipped, detached weight on a REINFORCE term
        loss = -adv * torch.clamp(ratio, max=high).detach() * lp
        clipped = clip_high = ratio.detach() > high
        clip_low = torch.zeros_like(clipped)
        cispo_clip = clip_high & (adv > 0)  # TRL's cispo_clip_ratio counts a positive advantage only
    elif objective.policy_loss == "sapo":  # a sigmoid gate instead of the clip
        tau = torch.where(adv > 0, adv.new_tensor(objective.sapo_temperature_pos),
                          adv.new_tensor(objective.sapo_temperature_neg))
        loss = -adv * torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
        clipped = clip_low = clip_high = torch.zeros_like(valid)
    elif objective.policy_loss == "vespo":  # detached sequence weight on a REINFORCE term
        folded = weight if objective.corrects_mismatch else None
        phi = _vespo_weight(log_ratio, valid, adv, objective, folded)
        loss = -adv * phi * lp
        clipped = clip_low = clip_high = torch.zeros_like(valid)
    else:
        unclipped = -adv * ratio
        clipped_loss = -adv * torch.clamp(ratio, low, high)
        # the clipped branch is flat wherever it is the larger one: its slope is 0 (as the reference)
        use_unclipped = unclipped >= clipped_loss
        loss = torch.where(use_unclipped, unclipped, clipped_loss.detach())
        clip_low, clip_high = (adv < 0) & (ratio < low), (adv > 0) & (ratio > high)
        clipped = clip_low | clip_high
        if objective.dual_clip is not None:
            cap = (-adv * objective.dual_clip).expand_as(loss)
            dual = (adv < 0) & (loss > cap)
            loss = torch.where(dual, cap, loss)
            clipped = clipped | dual
    mismatch = {"vespo_phi_sum": phi.sum()} if objective.policy_loss == "vespo" else {}
    if objective.off_policy_mask_threshold is not None:  # the policy term only: not the KL, not the bonus
        keep = _off_policy_keep(lp, old if sampler is None else sampler, valid, adv, objective)
        loss = loss * keep
        mismatch["off_policy_masked_sum"] = (keep == 0).sum()
    if sampler is not None:
        if objective.corrects_mismatch and objective.policy_loss != "vespo":  # vespo folded it in
            loss = loss * weight
        mismatch |= _mismatch_stats(delta, valid, corrected, objective)
    ent = _padded(entropy, lp)
    if objective.needs_entropy and ent is None:
        raise ValueError("entropy_coef / top_entropy_quantile need the trainer's token entropies")
    if ent is not None:
        ent = torch.where(valid, ent, zero)
        selected = valid
        if objective.top_entropy_quantile < 1.0:  # the policy term on the high-entropy tokens only
            flat = ent.detach()[valid].double()
            if flat.numel():
                threshold = torch.quantile(flat, 1.0 - objective.top_entropy_quantile)
                selected = valid & (ent.detach().double() >= threshold)
            loss = torch.where(selected, loss, zero)
        if objective.entropy_coef:
            loss = loss - objective.entropy_coef * ent
        mismatch["entropy_sum"] = ent.detach().sum()
        mismatch["entropy_selected_sum"] = selected.sum()

    kl = torch.zeros_like(lp)
    if objective.beta > 0:
        ref = _padded(ref_logp, lp)
        if ref is None:
            raise ValueError("beta > 0 needs reference log-probs (TrainBatch.ref_logprobs)")
        delta = torch.where(valid, ref, zero) - lp
        if objective.kl_estimator == "k1":
            kl = -delta
        elif objective.kl_estimator == "k2":
            kl = 0.5 * delta**2
        else:  # k3, Schulman's unbiased non-negative estimator
            kl = torch.exp(delta) - delta - 1.0
        if objective.kl_bias_correction:  # TRL's use_bias_correction_kl: times the ratio, not detached
            kl = kl * ratio
        loss = loss + objective.beta * kl

    n_seq = lp.shape[0] if num_sequences is None else num_sequences
    n_tok = float(lengths_t.sum()) if num_tokens is None else float(num_tokens)
    if objective.loss_aggregation == "seq_mean_token_mean":
        weight = 1.0 / (n_seq * lengths_t.clamp(min=1).to(lp.dtype))
    elif objective.loss_aggregation == "token_mean":
        weight = lp.new_full((lp.shape[0],), 1.0 / (n_tok if n_tok > 0 else 1.0))
    elif objective.loss_aggregation == "seq_mean_token_sum":  # LUSPO
        weight = lp.new_full((lp.shape[0],), 1.0 / n_seq)
    else:  # seq_mean_token_sum_norm (Dr.GRPO)
        weight = lp.new_full((lp.shape[0],), 1.0 / (n_seq * objective.max_completion_length))
    total = torch.where(valid, loss * weight[:, None], zero).sum()
    if ent is not None and objective.entropy_coef:  # the bonus's share of total: TRL's policy_loss is total - it
        mismatch["entropy_bonus_sum"] = torch.where(valid, -objective.entropy_coef * ent.detach() * weight[:, None],
                                                    zero).sum()
    # each completion's clipped fractions: TRL's clip_ratio/low_min and high_max are their extremes
    has = lengths_t > 0
    per_seq = lengths_t.clamp(min=1).to(torch.float64)
    low_share = (clip_low & valid).sum(dim=1).to(torch.float64) / per_seq
    high_share = (clip_high & valid).sum(dim=1).to(torch.float64) / per_seq
    stats = {
        "kl_sum": torch.where(valid, kl, zero).detach().sum(),
        "clip_sum": (clipped & valid).sum(),
        "clip_low_sum": (clip_low & valid).sum(),
        "clip_high_sum": (clip_high & valid).sum(),
        "cispo_clip_sum": (cispo_clip & valid).sum(),
        "tokens": lengths_t.sum(),
        "clip_low_min": low_share[has].min() if bool(has.any()) else torch.tensor(math.inf),
        "clip_high_max": high_share[has].max() if bool(has.any()) else torch.tensor(-math.inf),
        **mismatch,
    }
    return total, stats


@torch.no_grad()
def _mismatch_stats(delta: torch.Tensor, valid: torch.Tensor, corrected: torch.Tensor,
                    objective: Objective) -> dict[str, torch.Tensor]:
    """The sampler-trainer gap's sums and extremes (``reference.mismatch_metrics``): a token the
    sampler could not score (NaN) is counted in ``mismatch_unscored_sum`` and left out of the gap's
    sums and max (TRL's ``sampling_logp_difference`` leaves it out); with a correction on, the
    applied weights' sum, count, min and max (TRL's ``importance_sampling_ratio``: per token, or
    per sequence with tokens at sequence level; min inf and max -inf when there is none)."""
    zero = delta.new_zeros(())
    scored = valid & ~torch.isnan(delta)
    gap = torch.where(scored, delta, zero)
    out = {
        "mismatch_abs_sum": gap.abs().sum(),
        # float64 + expm1: the gaps are often ~1e-7, where float32 exp(d) - d - 1 is all rounding
        "mismatch_kl_sum": torch.where(scored, torch.expm1(gap.double()) - gap.double(), 0.0).sum(),
        "mismatch_over_sum": (scored & (gap.abs() > MISMATCH_THRESHOLD)).sum(),
        "mismatch_corrected_sum": (valid & corrected).sum(),
        "mismatch_unscored_sum": (valid & ~scored).sum(),
        "mismatch_abs_max": gap.abs().max() if gap.numel() else zero,
    }
    if objective.corrects_mismatch:
        if objective.mismatch_level == "sequence":  # one weight per sequence that has tokens
            ratios = _capped(torch.exp(gap.sum(dim=1)), objective)[0][valid.any(dim=1)]
        else:  # per token; an unscored one's gap is 0: weight 1, as the loss applies it
            ratios = _capped(torch.exp(gap), objective)[0][valid]
        has = ratios.numel() > 0
        out |= {"mismatch_ratio_sum": ratios.double().sum(), "mismatch_ratio_count": ratios.new_tensor(ratios.numel()),
                "mismatch_ratio_min": ratios.min() if has else torch.tensor(math.inf),
                "mismatch_ratio_max": ratios.max() if has else torch.tensor(-math.inf)}
    return out


@torch.no_grad()
def _off_policy_keep(lp: torch.Tensor, behaviour: torch.Tensor, valid: torch.Tensor, adv: torch.Tensor,
                     objective: Objective) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask ``[B, 1]`` (``reference.off_policy_keep``): 0 drops a
    negative-advantage sequence whose mean ``behaviour - lp`` (NaN as 0) exceeds the threshold."""
    gap = torch.where(valid, torch.nan_to_num(behaviour - lp.detach(), nan=0.0), lp.new_zeros(()))
    mean = gap.sum(dim=1, keepdim=True) / valid.sum(dim=1, keepdim=True).clamp(min=1).to(lp.dtype)
    return ((adv >= 0) | (mean <= cast(float, objective.off_policy_mask_threshold))).to(lp.dtype)


@torch.no_grad()
def _vespo_weight(log_ratio: torch.Tensor, valid: torch.Tensor, adv: torch.Tensor, objective: Objective,
                  correction: torch.Tensor | None) -> torch.Tensor:
    """VESPO's detached per-sequence weight ``[B, 1]`` (``reference.vespo_weight``)."""
    zero = log_ratio.new_zeros(())
    log_w = torch.where(valid, log_ratio.clamp(-VESPO_LOG_MAX, VESPO_LOG_MAX), zero).sum(dim=1, keepdim=True)
    if correction is not None:  # the mismatch correction's token weights, folded in (as TRL)
        log_c = torch.log(correction).clamp(VESPO_LOG_MIN, VESPO_LOG_MAX)
        log_w = log_w + torch.where(valid, log_c, zero).sum(dim=1, keepdim=True)
    log_w = log_w.clamp(VESPO_LOG_MIN, VESPO_LOG_MAX)
    nonneg = adv >= 0
    k = torch.where(nonneg, adv.new_tensor(objective.vespo_k_pos), adv.new_tensor(objective.vespo_k_neg))
    lam = torch.where(nonneg, adv.new_tensor(objective.vespo_lambda_pos),
                      adv.new_tensor(objective.vespo_lambda_neg)).clamp(min=1e-4)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def _mismatch_weights(delta: torch.Tensor, valid: torch.Tensor,
                      objective: Objective) -> tuple[torch.Tensor, torch.Tensor]:
    """TIS/MIS correction weight per token (detached) and where the cap changed it; a token the
    sampler could not score (NaN) gets none (``reference.mismatch_weights``)."""
    delta = torch.nan_to_num(delta, nan=0.0)
    if objective.mismatch_level == "sequence":
        delta = delta.sum(dim=1, keepdim=True).expand_as(delta)
    w, over = _capped(torch.exp(delta), objective)
    if not objective.corrects_mismatch:
        return w, over
    return torch.where(valid, w, torch.zeros_like(w)), over


def _capped(w: torch.Tensor, objective: Objective) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw ratios after the correction's cap and where the cap changed them
    (``reference.capped_weights``)."""
    over = w > objective.mismatch_cap
    if objective.mismatch_correction == "tis":
        return torch.clamp(w, max=objective.mismatch_cap), over
    if objective.mismatch_correction == "mis":
        return torch.where(over, torch.zeros_like(w), w), over
    return torch.ones_like(w), torch.zeros_like(over)


#: The gap's and the correction weights' extremes (TRL's sampling/... min and max,
#: ``reference.mismatch_metrics``), taken over micro-batches and ranks.
GAP_EXTREMES: dict[str, Callable[[float, float], float]] = {
    "mismatch_abs_max": max, "mismatch_ratio_min": min, "mismatch_ratio_max": max}



def _grad_norm(params: list[torch.nn.Parameter], max_norm: float | None) -> float:
    if max_norm is not None:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False))
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.nn.utils.get_total_norm(grads))


def _padding_loss(engine: TorchEngine, temperature: float) -> torch.Tensor:
    """A zero loss through the whole model: a rank with fewer micro-batches joins FSDP's collectives."""
    from polyrl_torch.sharding import dummy_sequence

    return engine.fsdp.root([dummy_sequence(engine)], temperature).sum() * 0.0  # type: ignore[union-attr]


def train_step(engine: TorchEngine, batch: TrainBatch, objective: Objective) -> StepMetrics:
    """One optimizer step on ``batch``; non-finite loss or gradient leaves the weights untouched."""
    optimizer = engine.require_optimizer()
    seqs, n = batch.sequences, len(batch.sequences)
    # under torchrun the loss is normalised by the global batch; see polyrl_torch.distributed.
    # It divides by the batch's normaliser counts (TrainBatch.loss_counts: rows TRL keeps with
    # nothing to train count too); the metrics are means over the tokens trained on.
    summed = distributed.sum_scalars([n, batch.num_tokens, *batch.loss_counts], engine.device)
    global_n, total_tokens, norm_n = (int(x) for x in summed[:3])
    norm_tokens = float(summed[3])  # fractional for a mini-batch (TrainBatch.normaliser_tokens)
    if global_n == 0:
        return StepMetrics(loss=0.0, grad_norm=0.0, tokens=0, skipped=True)
    if objective.beta > 0 and batch.ref_logprobs is None:
        raise ValueError("objective.beta > 0 but the batch has no ref_logprobs")
    micro = engine.config.optimizer.micro_batch_size or max(n, 1)
    params = engine.trainable_parameters()
    temperature = float(batch.temperature) or 1.0

    all_masks = batch.masks  # None for single-turn batches: nothing is indexed

    def mask_of(idx: range) -> list[torch.Tensor] | None:
        if all_masks is None:
            return None
        return [torch.as_tensor(all_masks[i], dtype=torch.bool, device=engine.device) for i in idx]

    def constants(values: list[np.ndarray] | None, idx: range,
                  keep: list[torch.Tensor] | None) -> list[torch.Tensor] | None:
        if values is None:
            return None
        return masked_in([torch.as_tensor(np.asarray(values[i], dtype=np.float32), device=engine.device)
                          for i in idx], keep)

    starts = list(range(0, n, micro))
    sharded = engine.fsdp is not None
    # a MoE model's load-balancing loss (TRL's router_aux_loss_coef): each micro-batch's, averaged
    # over the step's micro-batches on every rank (TRL: / gradient accumulation, then DDP's mean)
    aux_coef = router_aux_weight(engine, objective)
    if aux_coef and sharded:
        raise ConfigError("the MoE load-balancing loss is not supported under FSDP yet",
                          field="algorithm.router_aux_loss_coef",
                          fix="set router_aux_loss_coef = 0 in [algorithm] under fsdp = true, or train without FSDP")
    aux_micros = 1
    if aux_coef:
        aux_micros = max(1, int(distributed.sum_scalars([len(starts)], engine.device)[0])
                         if distributed.active() else len(starts))
    if sharded:  # every FSDP unit's forward/backward is a collective: all ranks run as many
        rounds = distributed.max_int(len(starts), engine.device)
        starts += [n] * (rounds - len(starts))  # empty ranges: zero-weight micro-batches

    optimizer.zero_grad(set_to_none=True)
    engine.model.train()
    loss_sum, kl_sum, clip_sum, finite = 0.0, 0.0, 0.0, True
    dropped = 0.0  # sequences the off-policy mask dropped
    phi_sum = 0.0  # vespo's sequence weights
    aux_sum = 0.0  # the micro-batches' MoE load-balancing losses
    bonus_sum = 0.0  # the entropy bonus's share of loss_sum (TRL's policy_loss leaves it out)
    mismatch: dict[str, float] = {}
    extremes = {"mismatch_abs_max": 0.0, "mismatch_ratio_min": math.inf, "mismatch_ratio_max": -math.inf}
    regions = dict.fromkeys(CLIP_REGION_KEYS, 0.0)
    low_min, high_max = math.inf, -math.inf  # over the batch's completions (inf: none seen)
    clock = {"forward": 0.0, "backward": 0.0, "grad_sync": 0.0, "optimizer": 0.0}  # phases, seconds
    try:
        for start in starts:
            t0 = time.perf_counter()
            idx = range(start, min(n, start + micro))
            if sharded and not len(idx):
                with engine.autocast():
                    loss = _padding_loss(engine, temperature)
            else:
                part = [seqs[i] for i in idx]
                entropy = None
                if sharded and objective.needs_entropy:
                    raise ValueError("entropy_coef / top_entropy_quantile are not supported under FSDP yet")
                aux = None
                with engine.autocast():  # mixed precision: the forward only, backward outside
                    if sharded:
                        logp = engine.fsdp.root.per_sequence(part, temperature)  # type: ignore[union-attr]
                    elif aux_coef:
                        logp, entropy, aux = token_logprobs_with_router_loss(
                            engine, part, temperature, differentiable=objective.entropy_coef != 0)
                    else:
                        logp, entropy = token_logprobs_with_entropy(engine, part, temperature,
                                                                    differentiable=objective.entropy_coef != 0)
                keep = mask_of(idx)
                logp, entropy = cast(list[torch.Tensor], masked_in(logp, keep)), masked_in(entropy, keep)
                loss, stats = objective_loss(
                    logp, torch.as_tensor(batch.advantages[start:idx.stop]), objective,
                    constants(batch.old_logprobs, idx, keep),
                    constants(batch.ref_logprobs, idx, keep) if objective.beta > 0 else None,
                    num_sequences=norm_n, num_tokens=norm_tokens,
                    sampler_logp=constants(batch.sampler_logprobs, idx, keep), entropy=entropy,
                )
                if aux is not None:  # TRL's loss + coef x aux / accumulation steps
                    loss = loss + aux_coef * aux.float() / aux_micros
                    aux_sum += float(aux.detach())
                value = float(loss.detach())
                loss_sum += value
                kl_sum += float(stats["kl_sum"])
                clip_sum += float(stats["clip_sum"])
                for key in CLIP_REGION_KEYS:
                    regions[key] += float(stats[f"{key}_sum"])
                low_min = min(low_min, float(stats["clip_low_min"]))
                high_max = max(high_max, float(stats["clip_high_max"]))
                dropped += float(stats.get("off_policy_masked_sum", 0.0))
                phi_sum += float(stats.get("vespo_phi_sum", 0.0))
                bonus_sum += float(stats.get("entropy_bonus_sum", 0.0))
                for key in MISMATCH_KEYS:
                    if f"{key}_sum" in stats:
                        mismatch[key] = mismatch.get(key, 0.0) + float(stats[f"{key}_sum"])
                for key in RATIO_SUMS:
                    if key in stats:
                        mismatch[key] = mismatch.get(key, 0.0) + float(stats[key])
                for key, pick in GAP_EXTREMES.items():
                    if key in stats:
                        extremes[key] = pick(extremes[key], float(stats[key]))
                if not math.isfinite(value):
                    finite = False
                    if not sharded:  # FSDP ranks must still run their backward (a collective)
                        break
            t1 = time.perf_counter()  # the forward's float(loss) above waited for the device
            loss.backward()
            wait_for_device(engine.device)  # else a GPU's backward would be billed to what reads next
            clock["forward"] += t1 - t0
            clock["backward"] += time.perf_counter() - t1
    finally:
        engine.model.eval()
    t2 = time.perf_counter()
    # this rank's own gap, before the sums over ranks (TRL averages per-process means)
    own_gap = rank_gap(mismatch, extremes, batch.num_tokens, objective.corrects_mismatch) \
        if batch.sampler_logprobs is not None else {}

    if distributed.active():  # every rank must take part, even one whose shard was empty or NaN
        # the metric sums every rank reports (an empty shard contributes zeros)
        with_sampler = batch.sampler_logprobs is not None
        expected = (SAMPLER_KEYS if with_sampler else ()) + (() if sharded else ENTROPY_KEYS) + \
            (RATIO_SUMS if with_sampler and objective.corrects_mismatch else ())
        summed = distributed.sum_scalars(
            [loss_sum if finite else 0.0, kl_sum, clip_sum, 0.0 if finite else 1.0]
            + [regions[k] for k in CLIP_REGION_KEYS] + [mismatch.get(k, 0.0) for k in expected]
            + [bonus_sum, aux_sum, phi_sum, dropped], engine.device)
        dropped = summed.pop()
        phi_sum = summed.pop()
        aux_sum = summed.pop()
        bonus_sum = summed.pop()
        loss_sum, kl_sum, clip_sum, bad = summed[:4]
        regions = dict(zip(CLIP_REGION_KEYS, summed[4:4 + len(CLIP_REGION_KEYS)]))
        mismatch = dict(zip(expected, summed[4 + len(CLIP_REGION_KEYS):]))
        finite = bad == 0
        neg_low_min, high_max, abs_max, neg_ratio_min, ratio_max = distributed.max_scalars(
            [-low_min, high_max, extremes["mismatch_abs_max"], -extremes["mismatch_ratio_min"],
             extremes["mismatch_ratio_max"]], engine.device)
        low_min = -neg_low_min
        extremes = {"mismatch_abs_max": abs_max, "mismatch_ratio_min": -neg_ratio_min, "mismatch_ratio_max": ratio_max}
        if finite and not sharded:  # FSDP already summed them (reduce-scatter in backward)
            distributed.sum_gradients(params)
    t3 = time.perf_counter()
    clock["grad_sync"] = t3 - t2
    grad_norm = _grad_norm(params, engine.config.optimizer.max_grad_norm) if finite else float("nan")
    denom = max(total_tokens, 1)
    scored = max(total_tokens - int(mismatch.get("mismatch_unscored", 0)), 1)
    extra = {"lr": apply_scheduled_lr(engine),
             **{k: v / (scored if k in SCORED_KEYS else denom) for k, v in mismatch.items() if k in MISMATCH_KEYS},
             **(gap_extremes(mismatch, extremes, objective.corrects_mismatch) if batch.sampler_logprobs is not None else {}),
             **own_gap,
             **{f"{k}_fraction": v / denom for k, v in regions.items()
                if k != "cispo_clip" or objective.policy_loss == "cispo"},
             **({"clip_low_min": low_min, "clip_high_max": high_max} if math.isfinite(low_min) else {}),
             **({"vespo_phi_seq_mean": phi_sum / global_n} if objective.policy_loss == "vespo" else {}),
             **({"off_policy_masked_fraction": dropped / global_n}
                if objective.off_policy_mask_threshold is not None else {}),
             **({"aux_loss": aux_sum / aux_micros} if aux_coef else {}),
             # TRL's policy_loss: the loss without the entropy bonus and the router term (the KL term
             # in), logged where there is a bonus, as TRL logs it
             **({"policy_loss": loss_sum - bonus_sum - (aux_coef * aux_sum / aux_micros if aux_coef else 0.0)}
                if objective.entropy_coef and finite else {})}
    metrics: dict[str, Any] = dict(loss=loss_sum, grad_norm=grad_norm, kl=kl_sum / denom,
                   clip_fraction=clip_sum / denom, tokens=total_tokens, extra=extra)
    if not (finite and math.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        return StepMetrics(**metrics, skipped=True)
    optimizer.step()
    engine.optimizer_steps += 1
    optimizer.zero_grad(set_to_none=True)
    wait_for_device(engine.device)
    clock["optimizer"] = time.perf_counter() - t3
    extra.update({f"time/{k}": round(v, 4) for k, v in clock.items()})
    if engine.device.type == "cuda":  # the GPU memory high-water mark so far (generation included)
        extra["memory/device_peak_mb"] = round(torch.cuda.max_memory_allocated(engine.device) / 2**20, 1)
    return StepMetrics(**metrics)
