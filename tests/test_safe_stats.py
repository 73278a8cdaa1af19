"""``polyrl.safe_stats.mean_std``: the logged mean and spread of rewards anywhere in float64's range."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.safe_stats import mean_std


def test_ordinary_values_give_numpys_own_bits_with_bessels_correction():
    """The sample std TRL logs as ``reward_std`` (``nanstd``, unbiased): polyrl logged the
    population std under that name (0.3307 where TRL's formula gives 0.3416 on one batch)."""
    rng = np.random.default_rng(0)
    for x in (rng.standard_normal(33), rng.uniform(-5, 5, 8) * 1e-3, np.array([0.0, 0.0])):
        with_nan = np.concatenate([x, [np.nan]])
        assert mean_std(with_nan) == (float(np.nanmean(with_nan)), float(np.nanstd(with_nan, ddof=1)))
    assert mean_std(np.array([0.25, np.nan])) == (0.25, 0.0)  # one value: no spread


@pytest.mark.parametrize("magnitude", [1e160, 1e200, 1.7e308])
def test_huge_rewards_have_their_true_spread_and_no_overflow_warning(magnitude):
    values = np.array([magnitude, -magnitude, magnitude, -magnitude, np.nan])
    with np.errstate(all="raise"):  # any overflow would raise here
        mean, std = mean_std(values)
    true_std = magnitude * (4 / 3) ** 0.5  # past float64's largest value for 1.7e308: inf
    assert mean == 0.0 and (std == pytest.approx(true_std, rel=1e-12) if true_std < 1.79e308 else std == float("inf"))


def test_no_values_give_nan():
    mean, std = mean_std(np.array([np.nan, np.nan]))
    assert np.isnan(mean) and np.isnan(std)
    assert all(np.isnan(v) for v in mean_std(np.array([])))
