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
