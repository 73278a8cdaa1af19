"""The policy objective a backend's ``train_step`` optimises.

One clipped-surrogate family covers GRPO, DAPO, Dr.GRPO, RLOO and REINFORCE; they differ in the
advantage estimator (see ``advantages.py``) and in the knobs below:

* ratio ``r_t = exp(logp_t - old_logp_t)`` per completion token;
* PPO clip ``[1 - clip_eps_low, 1 + clip_eps_high]`` (DAPO "clip-higher": eps_high > eps_low);
* optional dual clip (Ye et al. 2020): for negative advantages the loss is capped at
  ``-A * dual_clip``;
* KL to the reference with estimator k1 ``(l - r)``, k2 ``(l - r)^2 / 2`` or k3
  ``exp(r - l) - (r - l) - 1`` (Schulman's unbiased, non-negative estimator; TRL's choice), times
  ``beta``, where ``l`` is the policy's and ``r`` the reference's log-prob;
* loss aggregation:
  - ``seq_mean_token_mean`` (GRPO paper): mean over sequences of each sequence's token mean;
  - ``token_mean`` (DAPO, TRL "bnpo"/"dapo"): sum over all tokens / total tokens in the batch;
  - ``seq_mean_token_sum_norm`` (Dr.GRPO): sum over all tokens / (sequences * max_completion_length),
    a constant normaliser that removes the length bias.
"""

from __future__ import annotations

from typing import Literal

import attrs

from polyrl.errors import ConfigError

LossAggregation = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]
KLEstimator = Literal["k1", "k2", "k3"]

LOSS_AGGREGATIONS: tuple[str, ...] = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


@attrs.define(frozen=True)
class Objective:
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    dual_clip: float | None = None
    beta: float = 0.0
    kl_estimator: str = "k3"
    loss_aggregation: str = "seq_mean_token_mean"
    max_completion_length: int = 256  # the constant of seq_mean_token_sum_norm

    def __attrs_post_init__(self) -> None:
        if self.clip_eps_low < 0 or self.clip_eps_high < 0:
            raise ConfigError("clip epsilons must be >= 0", field="algorithm.epsilon")
        if self.clip_eps_low >= 1:
            raise ConfigError(
                "clip_eps_low must be < 1 (the ratio's lower bound 1 - eps must stay positive)",
                field="algorithm.epsilon",
            )
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ConfigError("dual_clip must be > 1 (or unset)", field="algorithm.dual_clip")
        if self.beta < 0:
            raise ConfigError("beta must be >= 0", field="algorithm.beta")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ConfigError(
                f"unknown KL estimator {self.kl_estimator!r}",
                field="algorithm.kl_estimator",
                fix=f"use one of {', '.join(KL_ESTIMATORS)}",
            )
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ConfigError(
                f"unknown loss aggregation {self.loss_aggregation!r}",
                field="algorithm.loss_aggregation",
                fix=f"use one of {', '.join(LOSS_AGGREGATIONS)}",
            )
        if self.max_completion_length <= 0:
            raise ConfigError("must be > 0", field="algorithm.max_completion_length")
