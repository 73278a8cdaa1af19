"""A step's rollout batch split into PPO mini-batches (``algorithm.minibatches``), one update each.

Why this shape: TRL's GRPOTrainer shuffles each process's generation batch once and splits it into
``steps_per_generation`` slices, ``gradient_accumulation_steps`` of them per optimizer update, and
with ``num_iterations`` > 1 walks the same slices again (verl and OpenRLHF split the same way).
Here each rank shuffles the rows of its shard that count in the loss (the kept groups: trained
rows and the truncated / unscorable ones TRL keeps in its batch, ``trainer._loss_counts``) with a
seed of the step and the rank, so a resumed run splits identically, and cuts them into
``minibatches`` near-equal parts. Every rank can recompute every other rank's split from the
gathered step, so all agree, with no collective, on which parts train nothing anywhere: those are
skipped on every rank (a backend's collectives need the same calls everywhere), and a part empty
on one rank only still steps there with an empty batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from polyrl.types import StepMetrics, TrainBatch


def split_rows(rows: np.ndarray, parts: int, seed: int) -> list[np.ndarray]:
    """``rows`` (indices) shuffled with ``seed`` and cut into ``parts`` near-equal parts (the first
    ones one longer). One part keeps the rows' order: the one-update step as it always was."""
    if parts == 1:
        return [rows]
    order = np.random.default_rng(seed).permutation(len(rows))
    return list(np.array_split(rows[order], parts))


def rank_splits(counted: np.ndarray, sizes: Sequence[int], parts: int, seeds: Sequence[int]) -> list[list[np.ndarray]]:
    """Each rank's parts, as indices into its own shard: ``counted`` is the whole step's mask of
    rows the loss counts (every rank's shard in rank order, ``sizes`` long each), ``seeds`` each
    rank's seed. The trained rows of a part are the rows its update trains on."""
    out, start = [], 0
    for size, seed in zip(sizes, seeds):
        mine = slice(start, start + size)
        out.append(split_rows(np.flatnonzero(counted[mine]), parts, seed))
        start += size
    return out


def live_parts(splits: list[list[np.ndarray]], trained: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Whether each part trains a row on some rank (the others are skipped on every rank)."""
    parts = len(splits[0]) if splits else 0
    live = np.zeros(parts, dtype=bool)
    start = 0
    for rank_parts, size in zip(splits, sizes):
        shard = trained[start:start + size]
        for k, rows in enumerate(rank_parts):
            live[k] |= bool(shard[rows].any())
        start += size
    return live


def take(whole: TrainBatch, rows: list[int], sequences: int, tokens: float) -> TrainBatch:
    """The rows ``rows`` of ``whole`` (in that order), their loss divided by ``sequences`` / ``tokens``."""
    def pick(values: list[np.ndarray] | None) -> list[np.ndarray] | None:
        return None if values is None else [values[j] for j in rows]

    return TrainBatch([whole.sequences[j] for j in rows], whole.advantages[rows], old_logprobs=pick(whole.old_logprobs),
                      ref_logprobs=pick(whole.ref_logprobs), temperature=whole.temperature,
                      sampler_logprobs=pick(whole.sampler_logprobs), normaliser_sequences=sequences,
                      normaliser_tokens=tokens)


def pass_metrics(updates: list[StepMetrics]) -> dict[str, Any]:
    """A step's train metrics from the updates of its last pass over the batch (the last
    iteration's, as with one mini-batch): each value the mean over its mini-batches' updates (as
    TRL's logged means over its micro-steps), ``tokens`` and a rank's own gap sums and counts
    (``backend_kit.gap_metrics.RANK_KEYS``) their sum (the pass's), a ``*_min``
    / ``*_max`` (``clip_low_min``, ``clip_high_max``) the extreme over the pass's completions,
    ``lr`` the last update's. One update: its own, unchanged."""
    if len(updates) == 1:
        return updates[0].as_dict()
    each = [u.as_dict() for u in updates]
    out: dict[str, Any] = {}
    for key in each[-1]:
        values = [d[key] for d in each if key in d]
        if key == "tokens":
            out[key] = int(sum(values))
        elif key.startswith("rank_") and key.endswith(("_sum", "_count")):  # a rank's own gap: the pass's
            out[key] = float(sum(values))
        elif key in ("lr", "skipped") or isinstance(values[-1], bool) or not isinstance(values[-1], (int, float)):
            out[key] = values[-1]
        elif key.endswith(("_min", "_max")):
            out[key] = float(min(values) if key.endswith("_min") else max(values))
        else:
            out[key] = float(np.mean(values))
    return out
