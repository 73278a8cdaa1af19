"""The KL coefficient of ``kl_in_reward``: fixed, or adapted towards a target KL.

The adaptive rule is Ziegler et al. 2019 ("Fine-Tuning Language Models from Human Preferences",
arXiv 1909.08593), as verl's ``kl_ctrl.type = "adaptive"``: after each batch the coefficient is
multiplied by ``1 + e * n / horizon`` where ``e = clip(kl / target - 1, -0.2, 0.2)`` and ``n``
is the batch's sample count. A policy drifting past the target KL is pulled back harder, one
that stays close is let loose; the clip and the horizon keep each step's change small.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

KL_CONTROLLERS: tuple[str, ...] = ("fixed", "adaptive")


def adapted_kl_coef(coef: float, current_kl: float, n_samples: int, target: float, horizon: int) -> float:
    """The next coefficient after a batch of ``n_samples`` whose mean KL was ``current_kl``."""
    error = float(np.clip(current_kl / target - 1.0, -0.2, 0.2))
    return coef * (1.0 + error * n_samples / horizon)


def batch_kl(kl_sums: Sequence[float], token_counts: Sequence[int]) -> float:
    """The KL the controller sees: each sequence's token-mean KL, averaged over the batch (as
    verl's ``masked_mean`` over tokens then mean over sequences)."""
    counts = np.maximum(np.asarray(token_counts, np.float64), 1.0)
    sums = np.asarray(kl_sums, np.float64)
    return float(np.mean(sums / counts)) if len(sums) else 0.0
