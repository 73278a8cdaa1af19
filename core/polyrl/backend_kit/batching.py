"""How backends group scored sequences: by prompt (shared-prompt forwards) and by length (padding).

Backend-neutral (numpy only), so the torch and MLX scorers batch the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyrl.types import TokenSequence


def prompt_groups(sequences: Sequence[TokenSequence]) -> tuple[list[int], list[np.ndarray]]:
    """(index of each sequence's prompt among the distinct prompts, the distinct prompts)."""
    index: dict[bytes, int] = {}
    prompts: list[np.ndarray] = []
    owners = []
    for s in sequences:
        ids = np.asarray(s.prompt_ids, dtype=np.int64)
        key = ids.tobytes()
        if key not in index:
            index[key] = len(prompts)
            prompts.append(ids)
        owners.append(index[key])
    return owners, prompts


def length_batches(sequences: Sequence[TokenSequence], budget: int) -> list[list[int]]:
    """Indices grouped by similar length (less padding), each group under ``budget`` padded tokens.

    A prompt's rows stay together (a shared-prompt forward computes that prompt once per batch);
    groups are ordered by their longest row.
    """
    def width(i: int) -> int:
        return len(sequences[i].prompt_ids) + len(sequences[i].completion_ids)

    owners, _ = prompt_groups(sequences)
    by_prompt: dict[int, list[int]] = {}
    for i, owner in enumerate(owners):
        by_prompt.setdefault(owner, []).append(i)
    groups_sorted = sorted((sorted(rows, key=width) for rows in by_prompt.values()),
                           key=lambda rows: width(rows[-1]))
    order = [i for rows in groups_sorted for i in rows]
    batches: list[list[int]] = []
    current: list[int] = []
    widest = 0
    for i in order:
        widest = max(widest, width(i))
        if current and widest * (len(current) + 1) > budget:
            batches.append(current)
            current, widest = [], width(i)
        current.append(i)
    if current:
        batches.append(current)
    return batches


#: Default cost of one more forward call, in padded tokens (backend option ``bucket_call_tokens``).
BUCKET_CALL_TOKENS = 64


def length_buckets(lengths: Sequence[int], call_cost: int) -> list[list[int]]:
    """Indices split into groups of similar length, with the fewest padded tokens overall.

    One forward pads every row to its longest, so 32 rows of which a few stopped early pay for
    the longest row each; several forwards pay a fixed overhead each instead. ``call_cost`` is that
    overhead in tokens: the split minimises ``sum(rows x longest) + call_cost x groups`` exactly
    (dynamic programme over the rows sorted by length). Groups come shortest first.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    sizes = [int(lengths[i]) for i in order]
    n = len(sizes)
    best = [0.0] + [float("inf")] * n  # best[j]: cost of splitting the j shortest rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # rows i..j-1 form the last group, padded to sizes[j - 1]
            cost = best[i] + (j - i) * sizes[j - 1] + call_cost
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups: list[list[int]] = []
    j = n
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]
