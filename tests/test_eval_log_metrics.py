"""polyrl.eval_log_metrics: a reward's log_metric during an evaluation, joined as TRL's flush and log."""

from __future__ import annotations

import math

import pytest

from polyrl.eval_log_metrics import PREFIX, call_sums, eval_means


def test_one_calls_values_are_pooled_over_its_rewards():
    """Two rewards logging "acc" in one call are one list in TRL: (2 x 0.5 + 1 x 1.0) / 3."""
    sums = call_sums({"a": {"mean": 0.0, "acc": 0.5}, "b": {"acc": 1.0, "other": 2.0}},
                     {"a": {"acc": 2}, "b": {"acc": 1}})
    assert sums == {"acc": (2.0, 3)}


def test_a_batch_is_every_ranks_call_and_the_evaluation_the_mean_of_its_batches():
    """Batch 0: rank 0 logged [1, 1] and rank 1 [0, 0] (TRL gathers [sum, count]: 2 / 4); batch 1:
    rank 0 alone [1] (1.0); the evaluation's value is the mean of the batches', (0.5 + 1) / 2."""
    ranks = [[{"acc": (2.0, 2)}, {"acc": (1.0, 1)}], [{"acc": (0.0, 2)}, {}]]
    assert eval_means(ranks) == {f"{PREFIX}acc": pytest.approx(0.75)}


def test_a_nan_batch_is_left_out_and_an_all_nan_name_is_nan():
    """TRL's log leaves a NaN batch value out of the mean, and logs a name with none valid as no value."""
    ranks = [[{"acc": (math.nan, 1), "bad": (math.nan, 2)}, {"acc": (3.0, 1)}]]
    out = eval_means(ranks)
    assert out[f"{PREFIX}acc"] == 3.0 and math.isnan(out[f"{PREFIX}bad"])
