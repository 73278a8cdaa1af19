"""Mean and spread of reward values anywhere in float64's range.

Why not ``np.nanstd``: rewards are a plugin's numbers, and squares of values past ~1e154 overflow
float64, so rewards of ±1e200 logged ``reward_std`` as inf (written null) with a numpy overflow
warning on the console. Scaling by a power of two first is exact, and the mean and the spread of
values within ``[-M, M]`` are at most ``M``, so scaling back cannot overflow.
"""

from __future__ import annotations

import numpy as np


def mean_std(values: np.ndarray) -> tuple[float, float]:
    """Mean and population standard deviation of ``values``' non-NaN entries (NaN, NaN when there
    are none)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if not x.size:
        return float("nan"), float("nan")
    peak = float(np.max(np.abs(x)))
    if not np.isfinite(peak) or peak == 0.0:
        with np.errstate(invalid="ignore"):
            return float(x.mean()), float(x.std())
    scale = float(np.ldexp(1.0, -int(np.frexp(peak)[1])))  # brings the largest magnitude into [0.5, 1)
    scaled = x * scale
    return float(scaled.mean() / scale), float(scaled.std() / scale)
