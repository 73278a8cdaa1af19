"""How backends group scored sequences: by prompt (shared-prompt forwards) and by length (padding).

Backend-neutral (numpy only), so the torch and MLX scorers batch the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np

from polyrl.types import TokenSequence

_T = TypeVar("_T")


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


#: A masked attention call's cost per (query, key) pair relative to a causal one's: CPU flash
#: attention with an explicit mask visits every key block (no causal skipping) but each block costs
#: a little less; fitted on SmolLM2 training steps (1 thread, AVX-512): 512 x 4 tokens favoured the
#: shared prompt by 3 %, 1024 x 2 the whole rows by 8 %.
MASKED_ATTENTION_WEIGHT = 0.8


def shared_prompt_pays(prompt_lens: Sequence[int], completion_lens: Sequence[int], owners: Sequence[int],
                       linear_flops_per_token: float, attention_flops_per_pair: float) -> bool:
    """Whether running each distinct prompt once and its rows' completions after its KV cache costs
    less than running every row whole.

    Sharing saves the repeated prompts' linears but runs the completions' attention with a mask
    (the cache's padding and offset), which skips no block, where whole rows attend causally. Short
    completions after a shared prompt (GRPO's usual batch) gain; a long completion after a short
    prompt loses: at 1024 completion tokens after a 46-token prompt the whole rows were 8 % faster.
    Costs are FLOP estimates: ``linear_flops_per_token`` through the backbone's weights,
    ``attention_flops_per_pair`` per (query, key) pair over all layers.
    """
    lin, att = linear_flops_per_token, attention_flops_per_pair
    whole = sum(lin * (p + c) + att * (p + c) * (p + c + 1) / 2 for p, c in zip(prompt_lens, completion_lens))
    width = max(prompt_lens, default=0)  # the shared cache is padded to its longest prompt
    firsts: dict[int, int] = {}
    for owner, p in zip(owners, prompt_lens):
        firsts.setdefault(owner, p)
    shared = sum(lin * p + att * width * p for p in firsts.values())
    shared += sum(lin * c + MASKED_ATTENTION_WEIGHT * att * c * (width + c) for c in completion_lens)
    return shared < whole


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



def in_length_batches(sequences: Sequence[TokenSequence], budget: int,
                      score: Callable[[list[TokenSequence]], Iterable[_T]]) -> list[_T]:
    """``score`` of every sequence, called once per ``length_batches`` group (one value per row of
    the group, in its order) and answered in the order the sequences were given."""
    out: list[_T | None] = [None] * len(sequences)
    for group in length_batches(sequences, budget):
        for i, value in zip(group, score([sequences[i] for i in group])):
            out[i] = value
    return out  # type: ignore[return-value]  # every index is in one group


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
