"""The sampler-trainer gap's step metrics as the training backends finish them (torch, MLX).

Each backend sums its per-token stats over micro-batches (and ranks) in its own arrays; what it
reports from those plain floats is the same: these names and ``gap_extremes``
(``polyrl.algorithms.reference.mismatch_metrics`` is the numpy reference).
"""

from __future__ import annotations

from collections.abc import Mapping

#: means over the tokens the sampler scored: an unscored (NaN) token has no gap
SCORED_KEYS = ("mismatch_abs", "mismatch_kl", "mismatch_over")
#: the correction's applied weights, summed (their mean is sum / count)
RATIO_SUMS = ("mismatch_ratio_sum", "mismatch_ratio_count")
_RATIO_KEYS = ("mismatch_ratio_min", "mismatch_ratio_mean", "mismatch_ratio_max")


def gap_extremes(sums: Mapping[str, float], extremes: Mapping[str, float], corrects_mismatch: bool) -> dict[str, float]:
    """``mismatch_abs_max`` and, with a correction on, ``mismatch_ratio_min``/``_mean``/``_max``
    over the batch (``sums`` holds ``RATIO_SUMS``, ``extremes`` the max and min seen): 0 when
    nothing was seen, as TRL logs then."""
    out = {"mismatch_abs_max": extremes.get("mismatch_abs_max", 0.0)}
    if corrects_mismatch:
        count = sums.get("mismatch_ratio_count", 0.0)
        out |= ({"mismatch_ratio_min": extremes["mismatch_ratio_min"],
                 "mismatch_ratio_mean": sums["mismatch_ratio_sum"] / count,
                 "mismatch_ratio_max": extremes["mismatch_ratio_max"]} if count else dict.fromkeys(_RATIO_KEYS, 0.0))
    return out


#: this rank's own gap stats (before any sum over ranks), summed over a step's mini-batches by
#: ``minibatches.pass_metrics`` (``*_sum`` / ``*_count``; ``*_min`` / ``*_max`` as extremes): TRL
#: averages per-process means, so the core needs each rank's (``step_metrics.trl_sampling``)
RANK_KEYS = ("rank_gap_abs_sum", "rank_gap_scored_count", "rank_gap_abs_max",
             "rank_ratio_sum", "rank_ratio_count", "rank_ratio_min", "rank_ratio_max")


def rank_gap(sums: Mapping[str, float], extremes: Mapping[str, float], tokens: int,
             corrects_mismatch: bool) -> dict[str, float]:
    """``RANK_KEYS`` from this rank's own ``sums`` (``mismatch_abs``, ``mismatch_unscored`` and
    ``RATIO_SUMS``) and ``extremes`` over its ``tokens`` loss tokens; the ratio's min / max are
    inf / -inf when it saw none (a sequence-level ratio counts the sequences with tokens)."""
    out = {"rank_gap_abs_sum": float(sums.get("mismatch_abs", 0.0)),
           "rank_gap_scored_count": float(tokens - sums.get("mismatch_unscored", 0.0)),
           "rank_gap_abs_max": float(extremes.get("mismatch_abs_max", 0.0))}
    if corrects_mismatch:
        out |= {"rank_ratio_sum": float(sums.get("mismatch_ratio_sum", 0.0)),
                "rank_ratio_count": float(sums.get("mismatch_ratio_count", 0.0)),
                "rank_ratio_min": float(extremes.get("mismatch_ratio_min", float("inf"))),
                "rank_ratio_max": float(extremes.get("mismatch_ratio_max", float("-inf")))}
    return out
