"""The policy objective a backend's ``train_step`` optimises.

One clipped-surrogate family covers GRPO, DAPO, Dr.GRPO, RLOO and REINFORCE; they differ in the
advantage estimator (see ``advantages.py``) and in the knobs below:

* ratio ``r_t = exp(logp_t - old_logp_t)`` per completion token;
* PPO clip ``[1 - clip_eps_low, 1 + clip_eps_high]`` (DAPO "clip-higher": eps_high > eps_low;
  ``clip_eps_low >= 1`` puts the lower bound at or below 0, where no ratio is clipped, as TRL's
  ``epsilon=10`` in its DeepSeek-R1 recipe);
* optional dual clip (Ye et al. 2020): for negative advantages the loss is capped at
  ``-A * dual_clip``;
* KL to the reference with estimator k1 ``(l - r)``, k2 ``(l - r)^2 / 2`` or k3
  ``exp(r - l) - (r - l) - 1`` (Schulman's unbiased, non-negative estimator; TRL's choice), times
  ``beta``, where ``l`` is the policy's and ``r`` the reference's log-prob; with
  ``kl_bias_correction`` (TRL's ``use_bias_correction_kl``, its default) the term is multiplied by
  the (not detached) importance ratio, token or sequence as the policy term's, and so is the
  reported ``kl``;
* loss aggregation:
  - ``seq_mean_token_mean`` (GRPO paper): mean over sequences of each sequence's token mean;
  - ``token_mean`` (DAPO, TRL "dapo"; TRL "bnpo" over one micro-batch): sum over all tokens / total tokens in the batch;
  - ``seq_mean_token_sum_norm`` (Dr.GRPO): sum over all tokens / (sequences * max_completion_length),
    a constant normaliser that removes the length bias.

Two alternatives to the token-level PPO ratio (both verified against ``reference.py``):

* ``importance_sampling_level = "sequence"`` (GSPO, Zheng et al. 2025, arXiv 2507.18071): one
  ratio per completion, ``s = exp(mean_t(logp_t - old_t))`` (the length-normalised sequence
  likelihood ratio), clipped like the token ratio; every token of the sequence shares it, and its
  gradient spreads evenly (``d s / d logp_t = s / |y|``). Token ratios are noisy per token; the
  sequence ratio matches the sequence-level reward.
* ``policy_loss = "cispo"`` (MiniMax-M1, arXiv 2506.13585): the loss is
  ``-sg(min(r_t, 1 + clip_eps_high)) * A * logp_t`` — the importance weight is clipped and
  detached, but no token's gradient is dropped (PPO zeroes clipped tokens, which kills rare
  "fork" tokens). The paper sets no effective lower bound; like TRL, only the upper one is used.

Two soft alternatives to the hard clip (TRL 1.16's ``loss_type`` of the same names):

* ``policy_loss = "sapo"`` (Soft Adaptive Policy Optimization, arXiv 2511.20347): the clip is
  replaced by a sigmoid gate, ``-A * (4 / tau) * sigmoid(tau * (r - 1))``, with ``tau`` =
  ``sapo_temperature_pos`` for A > 0 and ``sapo_temperature_neg`` otherwise. Its slope
  ``-4 A sigma (1 - sigma) r`` equals PPO's ``-A r`` at ``r = 1`` and fades smoothly as the ratio
  leaves 1, instead of dropping to 0 at the clip edge. Works at token or sequence (GSPO) level.
* ``policy_loss = "vespo"`` (Variational Sequence-Level Soft Policy Optimization): a detached
  sequence weight ``phi(w) = exp(lambda + k log w - lambda w)`` (a gamma shape, ``phi(1) = 1``) of
  the sequence ratio ``w = prod_t r_t`` (log-ratios clamped as TRL's ``get_gamma_weights``), on a
  REINFORCE term ``-phi * A * logp_t``; ``(k, lambda)`` = ``vespo_k_pos``/``vespo_lambda_pos`` for
  A >= 0, ``vespo_k_neg``/``vespo_lambda_neg`` otherwise. The weight computes its own sequence
  ratio, so ``importance_sampling_level`` must stay "token"; a mismatch correction's token
  weights are folded into ``w`` (as TRL) instead of multiplying the loss.

``loss_aggregation = "seq_mean_token_sum"`` is LUSPO's (Length-Unbiased Sequence Policy
Optimization, TRL ``loss_type="luspo"``): each sequence's token *sum*, averaged over sequences, so a
sequence-level (GSPO) loss weighs a sequence by its length instead of dividing it away.

Sampler-trainer mismatch correction (Yao et al. 2025, "Your efficient RL framework secretly brings
you off-policy RL training"): the sampler (MAX, MLX, a server) and the trainer compute slightly
different probabilities for the same weights, so the samples come from ``pi_sampler``, not from the
trainer's ``pi_old``. The policy term is multiplied by the detached weight
``w = pi_old / pi_sampler`` per token (``mismatch_level="token"``) or its product over the
sequence (``"sequence"``), capped: ``"tis"`` truncates ``w`` at ``mismatch_cap``, ``"mis"`` masks
(weight 0) tokens/sequences whose ``w`` exceeds it. The KL term is not reweighted (as TRL).

Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556, eq. 9; TRL's
``off_policy_mask_threshold``): with ``off_policy_mask_threshold = delta`` a sequence with a
negative advantage whose token mean of ``log pi_sampler - log pi_theta`` (the sampler's log-prob
minus the current policy's, detached; NaN counts as 0) exceeds ``delta`` has its policy term
multiplied by 0. Samples drawn far from the current policy with a negative advantage mostly push
down tokens the policy no longer emits, which destabilises training; positive-advantage samples
stay. The KL term and the entropy bonus are not masked, and a dropped sequence still counts in
the aggregation's divisors (as TRL).

Entropy (``H_t`` of the trainer's own next-token distribution, from the training forward):
``entropy_coef`` adds the bonus ``-entropy_coef * H_t`` to every token's loss (verl's
``entropy_coeff``); ``top_entropy_quantile = q < 1`` keeps the policy term only on tokens whose
entropy is at least the batch's (1 - q) quantile (Wang et al. 2025, "Beyond the 80/20 rule",
arXiv 2506.01939; TRL's ``top_entropy_quantile``). The quantile is taken over the tokens one
loss call sees: the micro-batch, as in TRL.
"""

from __future__ import annotations

from typing import Literal

import attrs

from polyrl.errors import ConfigError

LossAggregation = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]
KLEstimator = Literal["k1", "k2", "k3"]

LOSS_AGGREGATIONS: tuple[str, ...] = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm",
                                      "seq_mean_token_sum")
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
POLICY_LOSSES: tuple[str, ...] = ("ppo", "cispo", "sapo", "vespo")
IS_LEVELS: tuple[str, ...] = ("token", "sequence")
MISMATCH_CORRECTIONS: tuple[str, ...] = ("none", "tis", "mis")
ROUTER_AUX_FIX = "leave it unset for the model's own coefficient (Mixtral's and Qwen-MoE's: 0.001), 0 turns it off"


@attrs.define(frozen=True)
class Objective:
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    dual_clip: float | None = None
    beta: float = 0.0
    kl_estimator: str = "k3"
    #: TRL's ``use_bias_correction_kl``: the KL term times the importance ratio (token or sequence,
    #: as ``importance_sampling_level``), so a sample of the old policy estimates the current one's KL
    kl_bias_correction: bool = False
    loss_aggregation: str = "seq_mean_token_mean"
    max_completion_length: int = 256  # the constant of seq_mean_token_sum_norm
    policy_loss: str = "ppo"  # ppo (clipped surrogate) | cispo | sapo | vespo
    importance_sampling_level: str = "token"  # token | sequence (GSPO)
    mismatch_correction: str = "none"  # none | tis | mis
    mismatch_level: str = "token"  # token | sequence
    mismatch_cap: float = 2.0
    entropy_coef: float = 0.0  # loss -= entropy_coef * H_t (aggregated like the policy term)
    top_entropy_quantile: float = 1.0  # policy term only on the batch's top-q entropy tokens
    sapo_temperature_pos: float = 1.0  # SAPO gate temperature for A > 0 (TRL's default)
    sapo_temperature_neg: float = 1.05  # ... for A <= 0
    vespo_k_pos: float = 2.0  # VESPO gamma shape for A >= 0 (TRL's defaults)
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0  # ... for A < 0
    vespo_lambda_neg: float = 2.0
    #: DeepSeek-V3.2's delta: drop a negative-advantage sequence's policy term when its mean
    #: sampler-vs-current log-prob gap exceeds it (None: off)
    off_policy_mask_threshold: float | None = None
    #: weight of a Mixture-of-Experts model's router load-balancing loss, added per micro-batch as
    #: TRL's ``router_aux_loss_coef`` (None: the model config's own; a dense model has none, and a
    #: nonzero value there is an error). The backend resolves it (``backend_kit.router_aux``).
    router_aux_loss_coef: float | None = None

    @property
    def needs_entropy(self) -> bool:
        """Whether the loss (not just the metric) depends on the trainer's token entropies."""
        return self.entropy_coef != 0 or self.top_entropy_quantile < 1.0

    @property
    def corrects_mismatch(self) -> bool:
        return self.mismatch_correction != "none"

    def __attrs_post_init__(self) -> None:
        if self.clip_eps_low < 0 or self.clip_eps_high < 0:
            raise ConfigError("clip epsilons must be >= 0", field="algorithm.epsilon")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ConfigError("dual_clip must be > 1 (or unset)", field="algorithm.dual_clip")
        if self.beta < 0:
            raise ConfigError("beta must be >= 0", field="algorithm.beta")
        if not isinstance(self.kl_bias_correction, bool):
            raise ConfigError(f"must be true or false, got {self.kl_bias_correction!r}",
                              field="algorithm.kl_bias_correction")
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
        for name, value, valid in (
            ("policy_loss", self.policy_loss, POLICY_LOSSES),
            ("importance_sampling_level", self.importance_sampling_level, IS_LEVELS),
            ("mismatch_correction", self.mismatch_correction, MISMATCH_CORRECTIONS),
            ("mismatch_level", self.mismatch_level, IS_LEVELS),
        ):
            if value not in valid:
                raise ConfigError(f"unknown {name} {value!r}", field=f"algorithm.{name}",
                                  fix=f"use one of {', '.join(valid)}")
        if self.policy_loss == "cispo" and self.importance_sampling_level != "token":
            raise ConfigError("cispo weights each token by its own ratio; it has no sequence-level form",
                              field="algorithm.importance_sampling_level", fix='use "token" with cispo')
        self._validate_soft_losses()
        if not self.mismatch_cap > 1.0:
            raise ConfigError(f"must be > 1, got {self.mismatch_cap}", field="algorithm.mismatch_cap",
                              fix="2.0 is usual (TRL's cap is 3.0)")
        if not (self.entropy_coef >= 0 and self.entropy_coef < float("inf")):
            raise ConfigError(f"must be a finite number >= 0, got {self.entropy_coef}",
                              field="algorithm.entropy_coef", fix="0 disables the bonus; 1e-3 is usual")
        if not 0 < self.top_entropy_quantile <= 1:
            raise ConfigError(f"must be in (0, 1], got {self.top_entropy_quantile}",
                              field="algorithm.top_entropy_quantile",
                              fix="1.0 trains every token; 0.2 keeps the top 20% (Wang et al. 2025)")
        opsm = self.off_policy_mask_threshold
        if opsm is not None and not (isinstance(opsm, (int, float)) and not isinstance(opsm, bool)
                                     and 0 <= opsm < float("inf")):
            raise ConfigError(f"must be a finite number >= 0 or unset, got {opsm!r}",
                              field="algorithm.off_policy_mask_threshold",
                              fix="0.5 is usual (TRL's example); leave it unset to train every sequence")
        if self.max_completion_length <= 0:
            raise ConfigError("must be > 0", field="algorithm.max_completion_length")
        coef = self.router_aux_loss_coef
        if coef is not None and not (isinstance(coef, (int, float)) and not isinstance(coef, bool)
                                     and 0 <= coef < float("inf")):
            raise ConfigError(f"must be a finite number >= 0 or unset, got {coef!r}",
                              field="algorithm.router_aux_loss_coef", fix=ROUTER_AUX_FIX)

    def _validate_soft_losses(self) -> None:
        """SAPO's temperatures and VESPO's gamma parameters (checked whatever the policy loss, so a
        bad value is caught before someone switches to it)."""
        for name in ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_lambda_pos", "vespo_lambda_neg"):
            value = getattr(self, name)
            if not (0 < value < float("inf")):
                raise ConfigError(f"must be a finite number > 0, got {value}", field=f"algorithm.{name}",
                                  fix="TRL's defaults: sapo 1.0 / 1.05, vespo lambda 3.0 / 2.0")
        for name in ("vespo_k_pos", "vespo_k_neg"):
            value = getattr(self, name)
            if not (0 <= value < float("inf")):
                raise ConfigError(f"must be a finite number >= 0, got {value}", field=f"algorithm.{name}",
                                  fix="TRL's defaults: 2.0 (A >= 0) and 3.0 (A < 0)")
        if self.policy_loss == "vespo" and self.importance_sampling_level != "token":
            raise ConfigError("vespo computes its own sequence-level weight; the ratio level must be token",
                              field="algorithm.importance_sampling_level", fix='use "token" with vespo')
        if self.policy_loss == "vespo" and self.corrects_mismatch and self.mismatch_level != "token":
            raise ConfigError("vespo folds the mismatch correction's token weights into its sequence weight",
                              field="algorithm.mismatch_level", fix='use "token" with vespo (as TRL)')
