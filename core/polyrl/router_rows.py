"""The rows of TRL's batch that only a MoE model's router term sees: completions cut under
``mask_truncated_completions``.

Why: TRL 1.16 keeps a cut completion in its batch with its completion mask zeroed, and the
forward's attention mask (prompt mask + completion mask) is what transformers'
``load_balancing_loss_func`` averages over, so that row's prompt tokens count in the router term
and its completion's do not. polyrl's policy terms never train such a row; where the loss holds
the router term the trainer hands the backend the row's prompt alone (a ``TokenSequence`` with no
completion token: no policy, KL or entropy token, its prompt for the router term), in the row's
place in the batch so that micro-batches hold the rows TRL's do. Leaving the row out made the
term average over fewer tokens than TRL's on every step with a cut completion (and dropped it on
a step where every completion was cut, whose TRL loss is the router term alone).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from polyrl.types import Completion, TokenSequence, TrainBatch


def prompt_only(completion: Completion) -> TokenSequence:
    """``completion``'s prompt with no completion token: the row as TRL's router term sees it."""
    return TokenSequence(completion.prompt_ids, np.zeros(0, dtype=np.int64))


def router_rows(in_batch: np.ndarray, untruncated: np.ndarray, barred: np.ndarray | None) -> np.ndarray:
    """The cut rows whose prompts the router term counts: rows of the step's batch (``in_batch``:
    the groups dynamic sampling keeps, ``loss_selection``'s ``group_kept``) cut under
    ``mask_truncated_completions`` (not ``untruncated``), less the episodes no term trains
    (``barred``, ``step_gather.out_of_loss``; TRL's run stops there)."""
    rows = np.asarray(in_batch, dtype=bool) & ~np.asarray(untruncated, dtype=bool)
    return rows if barred is None else rows & ~np.asarray(barred, dtype=bool)


def joined(whole: TrainBatch, idx: np.ndarray, extra: np.ndarray,
           completions: Sequence[Completion]) -> tuple[TrainBatch, np.ndarray]:
    """``whole`` (the trained rows ``idx`` of ``completions``) with the prompt-only rows ``extra``
    (indices too) added at their places in the step's order, advantage 0 and no log-prob; returns
    the batch and its rows' indices. No ``extra``: ``whole`` and ``idx`` unchanged."""
    if not len(extra):
        return whole, idx
    rows = np.sort(np.concatenate([np.asarray(idx, dtype=np.int64), np.asarray(extra, dtype=np.int64)]))
    position = {int(row): j for j, row in enumerate(idx)}
    empty = np.zeros(0, dtype=np.float32)

    def pick(values: list[np.ndarray] | None) -> list[np.ndarray] | None:
        if values is None:
            return None
        return [values[position[int(r)]] if int(r) in position else empty for r in rows]

    sequences = [whole.sequences[position[int(r)]] if int(r) in position else prompt_only(completions[int(r)])
                 for r in rows]
    advantages = np.array([whole.advantages[position[int(r)]] if int(r) in position else 0.0 for r in rows])
    return attrs.evolve(whole, sequences=sequences, advantages=advantages, old_logprobs=pick(whole.old_logprobs),
                        ref_logprobs=pick(whole.ref_logprobs),
                        sampler_logprobs=pick(whole.sampler_logprobs)), rows


def shuffled(whole: TrainBatch, seed: int) -> TrainBatch:
    """``whole``'s rows in a random order drawn from ``seed`` (its normaliser counts kept).

    Why: TRL shuffles its generation batch (``shuffle_sequence_dict``) before cutting it into
    micro-batches of ``per_device_train_batch_size`` rows, and the router term is a mean per
    micro-batch (not linear in its tokens), so which rows share a micro-batch changes it. Kept
    in order, a group's completions (one prompt, routed alike) filled a micro-batch together,
    which TRL's shuffle rarely does. TRL draws its permutation from torch's global generator,
    whose state no seed of polyrl's reproduces, so polyrl draws its own: the same law over
    micro-batch contents as TRL's, not the same rows."""
    order = np.random.default_rng(seed).permutation(len(whole.sequences))

    def pick(values: list[np.ndarray] | None) -> list[np.ndarray] | None:
        return None if values is None else [values[j] for j in order]

    return attrs.evolve(whole, sequences=[whole.sequences[j] for j in order], advantages=whole.advantages[order],
                        old_logprobs=pick(whole.old_logprobs), ref_logprobs=pick(whole.ref_logprobs),
                        sampler_logprobs=pick(whole.sampler_logprobs))
