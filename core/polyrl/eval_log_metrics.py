"""What a reward's ``log_metric(name, value)`` logs during an evaluation, as TRL 1.16 logs it.

TRL scores each eval batch on its own (``_generate_and_score_completions`` per batch of
``per_device_eval_batch_size`` completions on each process): a name's values of one batch, every
process's, are summed over their number, and the evaluation's entry holds ``eval_<name>``, the mean
of those batch values, a NaN batch left out (``GRPOTrainer.log``). polyrl's evaluation scores each
rank's share of a batch in one call (``Trainer._eval_pass``); here are the per-call sums and their
join. Why: the name was missing from polyrl's eval entries, where a TRL script or dashboard reads it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: polyrl's evaluation metric for a ``log_metric`` name: ``eval/log_metric/<name>``, TRL's ``eval_<name>``
PREFIX = "eval/log_metric/"

#: one call's ``{name: (sum of its values, how many)}`` over every reward
Sums = dict[str, tuple[float, int]]


def call_sums(metrics: Mapping[str, Mapping[str, float]], counts: Mapping[str, Mapping[str, int]]) -> Sums:
    """One reward call's ``log_metric`` values, every reward's pooled by name: ``metrics`` and
    ``counts`` as ``RewardResult`` has them (each reward's mean of a name and how many values)."""
    out: dict[str, tuple[float, int]] = {}
    for reward, counted in counts.items():
        for name, count in counted.items():
            value = metrics.get(reward, {}).get(name)
            if count and value is not None:
                total, n = out.get(name, (0.0, 0))
                out[name] = (total + float(value) * count, n + int(count))  # NaN stays NaN, as TRL's sum
    return out


def eval_means(ranks: Sequence[Sequence[Sums]]) -> dict[str, Any]:
    """``eval/log_metric/<name>``: each batch's sum over its count, the batch's calls on every rank
    (``ranks[r][b]``: rank ``r``'s call for batch ``b``) together, then the mean over the batches
    that logged the name, NaN left out (NaN when every one is)."""
    batches: list[dict[str, tuple[float, int]]] = []
    for calls in ranks:
        for b, sums in enumerate(calls):
            while len(batches) <= b:
                batches.append({})
            for name, (total, n) in sums.items():
                was_total, was_n = batches[b].get(name, (0.0, 0))
                batches[b][name] = (was_total + total, was_n + n)
    values: dict[str, list[float]] = {}
    for batch in batches:
        for name, (total, n) in batch.items():
            values.setdefault(name, []).append(total / n if n else math.nan)
    out: dict[str, Any] = {}
    for name, per_batch in values.items():
        valid = [v for v in per_batch if not math.isnan(v)]
        out[f"{PREFIX}{name}"] = sum(valid) / len(valid) if valid else math.nan
    return out
