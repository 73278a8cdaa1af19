"""Reward arithmetic safe anywhere in float64's range: a power-of-two rescale, and the logged
mean and spread.

Why: rewards are a plugin's numbers, and squares of values past ~1e154 overflow float64, so a std
of ±1e200 rewards became inf (every std-scaled advantage 0, and ``reward_std`` logged null with a
numpy overflow warning on the console). Multiplying by a power of two is exact, so values are
rescaled before such sums and the results scaled back; ordinary values are not touched.
"""

from __future__ import annotations

import numpy as np

#: Values up to this magnitude are used as they are; larger ones are scaled by a power of two.
SAFE_MAGNITUDE = 1e100


def power_of_two_scale(values: np.ndarray) -> float:
    """A power of two that brings values past ``SAFE_MAGNITUDE`` below 1/4 in magnitude (NaN
    ignored), else 1.0: sums of four scaled values stay finite."""
    valid = np.abs(values[~np.isnan(values)])
    top = float(valid.max()) if valid.size else 0.0
    if top <= SAFE_MAGNITUDE:
        return 1.0
    return float(np.ldexp(1.0, -int(np.frexp(top)[1]) - 2))


def mean_std(values: np.ndarray) -> tuple[float, float]:
    """Mean and sample standard deviation (Bessel's ``ddof=1``, as TRL's logged ``reward_std``
    and ``rewards/<f>/std`` and the group advantages use; 0 for one value) of ``values``' non-NaN
    entries (NaN, NaN when there are none). The mean of values within ``[-M, M]`` is at most
    ``M``; their spread can pass float64's largest value only for values near it, and is then
    inf, without an overflow warning."""
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if not x.size:
        return float("nan"), float("nan")
    ddof = 1 if x.size > 1 else 0
    if not np.isfinite(x).all():
        with np.errstate(invalid="ignore"):
            return float(x.mean()), float(x.std(ddof=ddof))
    scale = power_of_two_scale(x)
    scaled = x * scale
    with np.errstate(over="ignore"):
        return float(scaled.mean() / scale), float(np.float64(scaled.std(ddof=ddof)) / np.float64(scale))
