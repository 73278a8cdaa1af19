"""How sequences are grouped for forwards: length buckets minimise padding plus per-call cost."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from polyrl.backend_kit.batching import length_buckets


def _cost(lengths: list[int], groups: list[list[int]], call_cost: int) -> int:
    return sum(len(g) * max(lengths[i] for i in g) + call_cost for g in groups)


def _brute_force_cost(lengths: list[int], call_cost: int) -> int:
    """Cheapest split of the sorted rows into consecutive groups, by trying every cut set."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = None
    for k in range(len(order)):
        for cuts in itertools.combinations(range(1, len(order)), k):
            bounds = [0, *cuts, len(order)]
            groups = [order[a:b] for a, b in zip(bounds, bounds[1:])]
            cost = _cost(lengths, groups, call_cost)
            best = cost if best is None else min(best, cost)
    return best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=9), st.integers(0, 80))
def test_length_buckets_partition_the_rows_at_the_least_cost(lengths, call_cost):
    groups = length_buckets(lengths, call_cost)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(g for g in groups)
    assert _cost(lengths, groups, call_cost) == _brute_force_cost(lengths, call_cost)
    longest = [max(lengths[i] for i in g) for g in groups]
    assert longest == sorted(longest)  # shortest group first


def test_length_buckets_on_a_grpo_batch():
    """The bench's batch: 8 rows stopped early, 24 ran to the limit of 31 scored tail tokens."""
    lengths = [3, 5, 10, 11, 12, 12, 12, 13] + [31] * 24
    groups = length_buckets(lengths, call_cost=64)
    assert [sorted(lengths[i] for i in g) for g in groups] == [lengths[:8], [31] * 24]
    assert length_buckets(lengths, call_cost=10**6) == [sorted(range(32), key=lambda i: lengths[i])]
    assert len(length_buckets(lengths, call_cost=0)) == len(set(lengths))
    assert length_buckets([], call_cost=64) == []


def test_a_shared_prompt_pays_for_short_completions_not_for_long_ones():
    """SmolLM2-135M's costs (7.1 MFLOP per token per layer through its weights, 30 layers; 69 kFLOP of
    attention per query-key pair): the GRPO reference batch shares its prompts, a 1024-token pair of
    completions after a 46-token prompt runs whole (measured 8 % faster), and a batch without
    repeated prompts never shares (nothing to save, only a mask to pay for)."""
    from polyrl.backend_kit.batching import shared_prompt_pays

    linear, attention = 2 * 3.54e6 * 30, 4 * 576 * 30

    def pays(length: int, group: int, prompts: int, prompt_len: int = 46) -> bool:
        rows = group * prompts
        return shared_prompt_pays([prompt_len] * rows, [length] * rows, [i // group for i in range(rows)],
                                  linear, attention)

    assert pays(32, 4, 8) and pays(128, 4, 2) and pays(512, 4, 1) and pays(32, 16, 2)
    assert not pays(1024, 2, 1) and not pays(4096, 2, 1)
    assert pays(1024, 2, 1, prompt_len=600)  # a long prompt is worth sharing again
    assert not pays(32, 1, 8)  # every prompt distinct
