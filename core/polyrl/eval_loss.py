"""The run's loss on the sampled eval completions: what TRL logs as ``eval_loss`` (and ``eval_kl``
with ``beta > 0``), for ``eval.loss = true``.

Why: TRL's ``evaluate()`` runs its ``compute_loss`` on the eval batch (``prediction_step``), so a TRL
user's dashboards, and transformers' ``metric_for_best_model`` default ``"loss"``, read
``eval_loss``. It is the loss one update would compute on those completions before changing the
weights: advantages within each eval group of each eval batch (as TRL's eval mode computes them,
with the run's shaping, keep mask and truncation mask), the policy's own log-probs as the "old" ones (ratio 1, as
TRL's ``per_token_logps.detach()``), the KL term against the reference when ``beta > 0``, and the
run's aggregation within each eval batch of ``eval.loss_batch`` completions (TRL's
``per_device_eval_batch_size`` x processes; 0: the whole set), whose losses are averaged as
transformers' evaluation loop averages them. It needs the trainer's token
entropies where the loss does: with ``top_entropy_quantile < 1`` it is not computed
(``selects_by_entropy``); with an entropy bonus (``entropy_coef``) ``eval/policy_loss`` (the loss
without it, as a training step logs) stands in for it, and a backend that gives token entropies
(``hookspecs.entropies``) adds ``eval/entropy`` and ``eval/loss`` with the bonus; nor where the loss holds a
Mixture-of-Experts model's router load-balancing term (TRL's eval loss adds it too), whose router
logits no ``logprobs`` returns either (``needs_router_loss``).

Pure numpy over what the trainer gathered (``polyrl.algorithms.reference.policy_loss``, the loss
every backend's train step is tested against), so every rank computes the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from polyrl.algorithms import reference
from polyrl.algorithms.objective import Objective
from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.backend_kit.router_aux import check_declared, is_moe, own_coef
from polyrl.model_config import config_tables


def selects_by_entropy(algo: AlgorithmConfig, max_completion_tokens: int | None) -> bool:
    """Whether the run's policy term keeps only its high-entropy tokens (``top_entropy_quantile`` <
    1): then no eval loss is computed (an entropy bonus alone leaves ``eval/policy_loss``)."""
    return algo.objective(max_completion_tokens).top_entropy_quantile < 1.0


def needs_router_loss(algo: AlgorithmConfig, model_path: str | None) -> bool:
    """Whether the run's loss holds a MoE model's router term (then the eval loss is not computed):
    a MoE model (its config.json) whose ``router_aux_loss_coef`` is not 0 (unset: the config's own,
    transformers' default for its type when the file declares none, ``own_coef``;
    ``null``, which transformers refuses to load, a ``ConfigError`` as at startup)."""
    tables = config_tables(model_path)
    if not tables or not is_moe(tables[0]):
        return False
    check_declared(tables[0], f"model {model_path!r}")  # null: transformers loads no such model
    coef = algo.router_aux_loss_coef
    if coef is None:
        coef = own_coef(tables[0])
    return float(coef) != 0.0


def kept(algo: AlgorithmConfig, scores: np.ndarray, shaped: np.ndarray, untruncated: np.ndarray,
         group_size: int, per_reward: np.ndarray | None, weights: Sequence[float],
         barred: np.ndarray | None, batch_of: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The training step's rule (``AlgorithmConfig.loss_selection``: the completions the loss sees,
    every completion's advantage, the completions its divisors count; ``barred``: the episodes no
    term trains, ``step_gather.out_of_loss``) applied within each eval
    batch (``batch_of``, from ``batches``), as TRL scores each eval batch on its own
    (``scale_rewards="batch"``' std and GDPO's sums are the batch's)."""
    keep, group_kept = np.zeros(len(shaped), dtype=bool), np.zeros(len(shaped), dtype=bool)
    advantages = np.zeros(len(shaped))
    for b in np.unique(batch_of):
        rows = np.asarray(batch_of) == b
        keep[rows], advantages[rows], group_kept[rows] = algo.loss_selection(
            scores[rows], shaped[rows], untruncated[rows], group_size,
            None if per_reward is None else per_reward[rows], list(weights),
            None if barred is None else np.asarray(barred)[rows])
    return keep, advantages, group_kept


def batches(count: int, batch: int) -> np.ndarray:
    """Each of ``count`` completions' eval batch: consecutive runs of ``batch`` (TRL's
    ``per_device_eval_batch_size`` x processes), or one batch for all when ``batch`` is 0."""
    return np.arange(count) // batch if batch > 0 else np.zeros(count, dtype=np.int64)


def divisors(counted: np.ndarray, untruncated: np.ndarray, tokens: Sequence[int],
             batch_of: np.ndarray) -> list[tuple[int, int]]:
    """Each eval batch's (sequences, tokens) the loss divides by, as ``trainer._loss_counts``: the
    ``counted`` completions (``kept``' third), the tokens of those not cut under
    ``mask_truncated_completions`` (``untruncated``; ``tokens``: each one's loss tokens)."""
    out = []
    for b in range(int(batch_of.max()) + 1 if len(batch_of) else 0):
        rows = counted & (batch_of == b)
        out.append((int(rows.sum()), int(sum(tokens[int(i)] for i in np.flatnonzero(rows & untruncated)))))
    return out


def metrics(algo: AlgorithmConfig, max_completion_tokens: int | None, logprobs: Sequence[np.ndarray],
            advantages: Sequence[float], ref_logprobs: Sequence[np.ndarray] | None,
            masks: Sequence[np.ndarray | None], batch_of: Sequence[int], batch_sizes: Sequence[int],
            counts: Sequence[tuple[int, int]], entropies: Sequence[np.ndarray] | None = None) -> dict[str, float]:
    """``eval/loss`` and, with the KL term in the loss, ``eval/kl`` for the kept completions'
    policy log-probs ``logprobs``, as TRL's evaluation loop reports them: each eval batch's loss
    (``batch_of``: the kept completions' batch; ``batch_sizes``: every batch's completions, kept or
    not; ``counts``: each batch's ``divisors``) averaged with its size as weight (transformers
    repeats a batch's loss once per sample), each batch's token-mean KL averaged as equals (TRL's
    per-batch metric list). A batch whose rows were all cut or unscored weighs in at 0, as in TRL;
    one with no group kept (every group flat under dynamic sampling) is left out; none at all: NaN,
    and so is each other value below (the series of each key has no hole that evaluation).
    Also TRL's eval clip ratios (``ratio_one_metrics``), which its ``evaluate()`` returns.

    With an entropy bonus (``entropy_coef`` > 0), as a training step logs it: ``eval/policy_loss``,
    the loss without the bonus (TRL's ``policy_loss``), and given the kept completions' token
    ``entropies`` (``hookspecs.entropies``) ``eval/entropy``, their token mean, and ``eval/loss``
    with the bonus; without them no ``eval/loss`` (the bonus is unknown), each batch's value
    averaged as equals (TRL's per-batch metric lists)."""
    objective = algo.objective(max_completion_tokens)
    bonus = objective.entropy_coef > 0
    plain = attrs.evolve(objective, entropy_coef=0.0)
    any_mask = any(m is not None for m in masks)
    losses, plains, kls, ents, weights = [], [], [], [], []
    for b, (sequences, tokens) in enumerate(counts):
        if not sequences:
            continue
        members = [i for i, x in enumerate(batch_of) if x == b]
        inputs: dict[str, Any] = dict(
            logprobs=[np.asarray(logprobs[i], np.float64) for i in members], advantages=[advantages[i] for i in members],
            ref_logprobs=None if ref_logprobs is None else [np.asarray(ref_logprobs[i], np.float64) for i in members],
            masks=[_mask(masks[i], len(logprobs[i])) for i in members] if any_mask else None,
            num_sequences=sequences, num_tokens=tokens)
        loss, parts = reference.policy_loss(objective=plain, **inputs) if members else (0.0, {"kl": 0.0})
        plains.append(float(loss))
        if bonus and entropies is not None:
            loss, parts = reference.policy_loss(
                objective=objective, entropies=[np.asarray(entropies[i], np.float64) for i in members],
                **inputs) if members else (0.0, {"kl": 0.0, "entropy": 0.0})
            ents.append(float(parts["entropy"]))
        losses.append(float(loss))
        kls.append(parts["kl"])
        weights.append(batch_sizes[b])
    unknown = bonus and entropies is None  # the bonus's value: no eval/loss
    if not losses:  # each key a kept group gives, NaN: the bonus's two, the KL and clip ratios too
        keys = ([] if unknown else ["eval/loss"]) + (["eval/policy_loss"] if bonus else []) + \
            (["eval/entropy"] if bonus and entropies is not None else []) + \
            (["eval/kl"] if ref_logprobs is not None else []) + list(ratio_one_metrics(objective, False))
        return dict.fromkeys(keys, float("nan"))
    out = {} if unknown else {"eval/loss": float(np.average(losses, weights=weights))}
    if bonus:
        out["eval/policy_loss"] = float(np.mean(plains))
    if ents:
        out["eval/entropy"] = float(np.mean(ents))
    if ref_logprobs is not None:
        out["eval/kl"] = float(np.mean(kls))
    out.update(ratio_one_metrics(objective, all(tokens > 0 for sequences, tokens in counts if sequences)))
    return out


def ratio_one_metrics(objective: Objective, every_batch_has_tokens: bool) -> dict[str, float]:
    """TRL's clip ratios of an eval batch, whose ratio is 1 (``per_token_logps.detach()``): no token
    is clipped, so for its clipped-ratio losses (polyrl's ``ppo``) ``eval/clip_ratio/low_mean``,
    ``/high_mean``, ``/region_mean`` are 0 (a masked mean dividing by at least 1), and so are
    ``/low_min`` and ``/high_max`` (each completion's share; NaN at the token level when a batch
    has no loss token, TRL's ``nanmin`` over no number, which its batch average carries), and
    ``cispo``'s ``eval/cispo_clip_ratio``. Why: TRL's ``evaluate()`` returns them (its
    ``prediction_step`` runs ``compute_loss``), and a dashboard or ``metric_for_best_model`` may
    read them; polyrl returned none."""
    if objective.policy_loss == "cispo":
        return {"eval/cispo_clip_ratio": 0.0}
    if objective.policy_loss != "ppo":
        return {}
    extreme = 0.0 if every_batch_has_tokens or objective.importance_sampling_level == "sequence" else float("nan")
    return {"eval/clip_ratio/low_mean": 0.0, "eval/clip_ratio/high_mean": 0.0, "eval/clip_ratio/region_mean": 0.0,
            "eval/clip_ratio/low_min": extreme, "eval/clip_ratio/high_max": extreme}


def _mask(mask: np.ndarray | None, tokens: int) -> np.ndarray:
    """A completion's loss mask: all its tokens where it has none (a single-turn completion)."""
    return np.ones(tokens, dtype=bool) if mask is None else mask
