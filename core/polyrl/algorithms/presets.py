"""Algorithm presets: one validated record that names GRPO, DAPO, Dr.GRPO, RLOO or REINFORCE.

An ``AlgorithmConfig`` says how rewards become advantages (``advantages``, ``keep_mask``,
``shape_rewards``) and which clipped-surrogate ``Objective`` the backend optimises. Presets fill
each algorithm's published defaults; any field can be overridden::

    AlgorithmConfig.preset("dapo", beta=0.01).objective(max_completion_length=256)

Preset defaults (and why):

=========  ==========  =======  ======================  ==========  =============================
name       advantage   scale    loss_aggregation        clip eps    extras
=========  ==========  =======  ======================  ==========  =============================
grpo       group       group    seq_mean_token_mean     .2 / .2     beta 0 (TRL default since 0.19)
dapo       group       group    token_mean              .2 / .28    dynamic sampling, overlong
                                                                    shaping (buffer 20%, factor 1)
dr_grpo    group       none     seq_mean_token_sum_norm .2 / .2     no std scaling, no length norm
rloo       rloo        none     token_mean              .2 / .2     leave-one-out baseline
reinforce  reinforce   none     token_mean              .2 / .2     batch-mean baseline
gspo       group       group    seq_mean_token_mean     3e-4/4e-4   sequence-level ratio
cispo      group       group    token_mean              .2 / 4.0    clipped, detached IS weight
sapo       group       group    seq_mean_token_mean     (none)      sigmoid gate, tau 1.0 / 1.05
vespo      group       group    token_mean              (none)      gamma sequence weight
luspo      group       group    seq_mean_token_sum      3e-4/4e-4   sequence ratio, length-weighted
=========  ==========  =======  ======================  ==========  =============================

* DAPO (Yu et al. 2025): clip-higher ``eps_high = 0.28``, token-level loss, dynamic sampling,
  soft overlong punishment. The paper uses a 4096-token buffer on a 20480-token limit, i.e. 20%;
  ``overlong_buffer`` therefore accepts a fraction in (0, 1) of ``max_completion_length`` (the
  preset's 0.2) as well as an absolute token count (int >= 1).
* Dr.GRPO (Liu et al. 2025): mean-centred advantages and a constant normaliser
  (``sequences * max_completion_length``), removing the std and length biases.
* RLOO (Ahmadian et al. 2024): the baseline is the mean of the *other* samples of the prompt;
  rewards are not std-scaled (as in the paper); token-mean aggregation so that long and short
  completions weigh per token, the same choice as DAPO.
* GSPO (Zheng et al. 2025, arXiv 2507.18071): ``importance_sampling_level="sequence"``, the
  length-normalised sequence ratio, clipped at the paper's 3e-4 / 4e-4 (a sequence ratio sits much
  closer to 1 than a token ratio, so the band is narrow).
* CISPO (MiniMax-M1, arXiv 2506.13585): ``policy_loss="cispo"``; the cap on the detached weight is
  ``1 + epsilon_high`` = 5 (ScaleRL's choice, TRL's ``epsilon_high=5`` for cispo), token-mean.
* SAPO (arXiv 2511.20347), VESPO and LUSPO (arXiv 2602.05261) are TRL 1.16's ``loss_type`` values
  of those names, with TRL's aggregation for each (``sapo``: per-sequence token mean; ``vespo``: the
  batch's token mean; ``luspo``: per-sequence token sum) and TRL's parameter defaults. TRL leaves
  LUSPO's clip at its generic 0.2 and warns unless the ratio is sequence-level; the preset sets the
  sequence level with GSPO's band, since LUSPO is GSPO re-weighted by length.
* ``kl_in_reward = true`` (verl's ``use_kl_in_reward``): ``beta`` times the sequence's summed KL
  estimate (``kl_estimator``; k1 is verl's default ``kl_penalty="kl"``) is subtracted from its
  reward before advantages, and the loss has no KL term. ``kl_ctrl = "adaptive"`` steers that
  coefficient towards ``kl_target`` (see ``kl_control.py``); "fixed" keeps ``beta``.
* Every preset takes ``mismatch_correction`` ("none" | "tis" | "mis"), ``mismatch_level``
  ("token" | "sequence") and ``mismatch_cap``: see ``objective.py``.
* Every preset takes ``off_policy_mask_threshold`` (DeepSeek-V3.2's off-policy sequence mask,
  TRL's field of that name): see ``objective.py``.
* REINFORCE: batch-mean baseline, no std scaling. With ``num_iterations = 1`` the ratio is
  always 1, so the clip has no effect and the loss is plain policy gradient.

``max_completion_length`` is the generation limit (``generation.max_new_tokens``). It is needed by
Dr.GRPO's normaliser and by overlong shaping. Leave it None and the ``max_completion_length``
argument of ``objective()`` / ``shape_rewards()`` is used (the trainer passes max_new_tokens, or
``environment.max_episode_tokens`` for multi-turn episodes); set it and it wins over that argument.
An episode's length there is all its tokens after the first prompt, the tool results and
observations polyrl inserted included: a verbose tool or environment pushes overlong shaping's
penalty onto the model's reward (the budget is the episode's, as ``max_episode_tokens`` is).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

import attrs
import numpy as np

from polyrl.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    MULTI_OBJECTIVE_AGGREGATIONS,
    SCALE_REWARDS,
    as_groups,
    compute_advantages,
    decoupled_advantages,
)
from polyrl.algorithms.kl_control import KL_CONTROLLERS
from polyrl.algorithms.objective import (
    IS_LEVELS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    MISMATCH_CORRECTIONS,
    POLICY_LOSSES,
    ROUTER_AUX_FIX,
    Objective,
)
from polyrl.algorithms.shaping import dynamic_sampling_mask, expand_group_mask, shape_overlong
from polyrl.errors import ConfigError
from polyrl.configtools import unknown_key_fix
from polyrl.trl_names import trl_value_fix
from polyrl.validators import fits_float, shown

ALGORITHMS: tuple[str, ...] = ("grpo", "dapo", "dr_grpo", "rloo", "reinforce", "gspo", "cispo", "sapo", "vespo",
                               "luspo")

#: Each preset's values for the fields that differ from the class defaults (which are GRPO's).
PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {},
    "dapo": {
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "loss_aggregation": "token_mean",
        "dynamic_sampling": True,
        "overlong_buffer": 0.2,
        "overlong_penalty": 1.0,
    },
    "dr_grpo": {"scale_rewards": "none", "loss_aggregation": "seq_mean_token_sum_norm"},
    "rloo": {"advantage": "rloo", "scale_rewards": "none", "loss_aggregation": "token_mean"},
    "reinforce": {"advantage": "reinforce", "scale_rewards": "none", "loss_aggregation": "token_mean"},
    "gspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
    "cispo": {"policy_loss": "cispo", "epsilon_high": 4.0, "loss_aggregation": "token_mean"},
    "sapo": {"policy_loss": "sapo"},
    "vespo": {"policy_loss": "vespo", "loss_aggregation": "token_mean"},
    "luspo": {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4,
              "loss_aggregation": "seq_mean_token_sum"},
}
#: Estimators whose baseline is the prompt's own group: a group of identical samples gets 0 (the
#: ``reinforce`` batch baseline compares across prompts, so greedy groups still differ there).
GROUP_RELATIVE_ADVANTAGES: tuple[str, ...] = ("group", "rloo")
#: The soft losses' parameters (TRL's ``GRPOConfig`` names and defaults); validated by ``Objective``.
SOFT_LOSS_FIELDS: tuple[str, ...] = ("sapo_temperature_pos", "sapo_temperature_neg", "vespo_k_pos",
                                     "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")


#: Keys that act only under some setting: (key, whether it acts, why it does not, the fix). A key
#: given explicitly where it would do nothing is refused (a silently ignored knob reads as a tuned
#: one); the preset's own values never are.
_Rule = tuple[str, Callable[["AlgorithmConfig"], bool], Callable[["AlgorithmConfig"], str], str]
_SAPO = ("sapo_temperature_pos", "sapo_temperature_neg")
_VESPO = ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")


def _loss(a: AlgorithmConfig) -> str:
    return f"policy_loss {a.policy_loss!r} does not use it"


_CONDITIONAL: tuple[_Rule, ...] = (
    ("epsilon", lambda a: a.policy_loss == "ppo" or (a.policy_loss == "cispo" and a.epsilon_high is None),
     _loss, 'the lower clip binds with policy_loss "ppo" only (cispo caps its weight at 1 + epsilon_high); '
     "remove it"),
    ("epsilon_high", lambda a: a.policy_loss in ("ppo", "cispo"), _loss,
     'sapo and vespo have no clip: remove it, or use policy_loss "ppo" or "cispo"'),
    ("dual_clip", lambda a: a.dual_clip is None or a.policy_loss == "ppo", _loss,
     'the dual clip caps the PPO surrogate only: remove it, or use policy_loss "ppo"'),
    *((name, lambda a: a.policy_loss == "sapo", _loss, 'remove it, or set policy_loss = "sapo"') for name in _SAPO),
    *((name, lambda a: a.policy_loss == "vespo", _loss, 'remove it, or set policy_loss = "vespo"') for name in _VESPO),
    ("kl_estimator", lambda a: a.beta > 0, lambda a: "beta = 0 has no KL term",
     "set algorithm.beta > 0 (e.g. 0.04), or remove it"),
    ("kl_bias_correction", lambda a: a.beta > 0 and not a.kl_in_reward,
     lambda a: "beta = 0 has no KL term" if a.beta <= 0 else "kl_in_reward puts the KL in the reward, not the loss",
     "it weights the loss's KL term: set algorithm.beta > 0 with kl_in_reward = false, or remove it"),
    *((name, lambda a: a.kl_ctrl == "adaptive", lambda a: 'kl_ctrl "fixed" keeps beta as it is',
       'set kl_ctrl = "adaptive" (with kl_in_reward = true), or remove it') for name in ("kl_target", "kl_horizon")),
    ("scale_rewards", lambda a: not a.decouples_rewards,
     lambda a: "multi_objective_aggregation 'normalize_then_sum' scales each reward by its group's std and their sum "
               "by the batch's",
     "remove it, or use multi_objective_aggregation = 'sum_then_normalize'"),
    ("ref_sync_alpha", lambda a: a.ref_sync_every > 0, lambda a: "ref_sync_every = 0 never refreshes the reference",
     "set ref_sync_every > 0, or remove it"),
    ("overlong_penalty", lambda a: a.overlong_buffer is not None, lambda a: "overlong shaping is off",
     "set overlong_buffer (e.g. 0.2 of the max length), or remove it"),
    ("max_completion_length",
     lambda a: a.overlong_buffer is not None or a.loss_aggregation == "seq_mean_token_sum_norm",
     lambda a: "it sets only Dr.GRPO's normaliser and overlong shaping, and neither is on",
     "TRL's max_completion_length (the generation limit) is polyrl's generation.max_new_tokens: "
     "write max_new_tokens = N in [generation] and remove it here"),
    *((name, lambda a: a.mismatch_correction != "none", lambda a: 'mismatch_correction "none" corrects nothing',
       'set mismatch_correction = "tis" or "mis", or remove it') for name in ("mismatch_level", "mismatch_cap")),
)


def check_given_keys_act(config: AlgorithmConfig, given: Iterable[str]) -> None:
    """Refuse a key the user set (``given``) that ``config`` never reads (``_CONDITIONAL``)."""
    keys = set(given)
    for name, acts, why, fix in _CONDITIONAL:
        if name in keys and not acts(config):
            _fail(name, f"is set but does nothing here: {why(config)}", fix)


def refuse_preset_shaping_under_gdpo(name: str, overrides: dict[str, Any]) -> None:
    """The dapo preset's overlong shaping cannot act under normalize_then_sum, and a TOML key cannot
    be unset: the general error's "remove it" would point at a line the user never wrote."""
    if overrides.get("multi_objective_aggregation") != "normalize_then_sum" or "overlong_buffer" in overrides:
        return
    if PRESETS[name].get("overlong_buffer") is None:
        return
    kept = {k: v for k, v in PRESETS[name].items() if not k.startswith("overlong_")}
    same = ", ".join(f"{k} = {v!r}".replace("True", "true") for k, v in kept.items())
    _fail("overlong_buffer",
          f"the {name} preset turns on overlong shaping, which multi_objective_aggregation = 'normalize_then_sum' "
          "cannot apply (it adds a penalty to the summed reward, which normalize_then_sum never forms)",
          f"for {name} without overlong shaping set name = 'grpo' with {same}; or keep {name} with "
          "multi_objective_aggregation = 'sum_then_normalize'")


def _fail(name: str, message: str, fix: str | None = None) -> NoReturn:
    raise ConfigError(message, field=f"algorithm.{name}", fix=fix)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


@attrs.define(frozen=True)
class AlgorithmConfig:
    """The ``[algorithm]`` table. Class defaults are the GRPO preset; prefer ``preset(name)``."""

    name: str = "grpo"
    advantage: str = "group"  # group | rloo | reinforce
    scale_rewards: str = "group"  # group | batch | none
    #: several rewards: summed then turned into advantages, or each normalized in its group first
    #: (GDPO; TRL's multi_objective_aggregation, ``polyrl.algorithms.advantages``)
    multi_objective_aggregation: str = "sum_then_normalize"
    epsilon: float = 0.2  # lower clip: ratio >= 1 - epsilon
    epsilon_high: float | None = None  # upper clip: ratio <= 1 + epsilon_high (None = epsilon)
    dual_clip: float | None = None
    beta: float = 0.0
    kl_estimator: str = "k3"
    kl_bias_correction: bool = False  # the KL term times the importance ratio (TRL's use_bias_correction_kl)
    loss_aggregation: str = "seq_mean_token_mean"
    num_iterations: int = 1  # optimizer steps per rollout batch
    #: PPO mini-batches: the step's samples are split into this many parts, one optimizer update
    #: each, per pass (``num_iterations`` passes): TRL's steps_per_generation / gradient_accumulation_steps
    minibatches: int = 1
    dynamic_sampling: bool = False
    overlong_buffer: int | float | None = None  # tokens (int) or fraction of max length (0..1)
    overlong_penalty: float = 1.0
    max_completion_length: int | None = None
    policy_loss: str = "ppo"  # ppo | cispo | sapo | vespo
    importance_sampling_level: str = "token"  # token | sequence (GSPO)
    mismatch_correction: str = "none"  # none | tis | mis (sampler-trainer mismatch)
    mismatch_level: str = "token"  # token | sequence
    mismatch_cap: float = 2.0
    entropy_coef: float = 0.0
    top_entropy_quantile: float = 1.0
    #: DeepSeek-V3.2's off-policy sequence mask (TRL's off_policy_mask_threshold; None: off)
    off_policy_mask_threshold: float | None = None
    #: a Mixture-of-Experts model's router load-balancing loss weight (TRL's router_aux_loss_coef;
    #: None: the model config's own)
    router_aux_loss_coef: float | None = None
    mask_truncated_completions: bool = False  # drop completions cut at the length limit (TRL/DAPO)
    ref_sync_every: int = 0  # refresh the reference every N steps (TR-DPO; 0 = never)
    ref_sync_alpha: float = 0.6  # reference <- alpha x policy + (1 - alpha) x reference
    sapo_temperature_pos: float = 1.0  # SAPO's gate temperature for A > 0
    sapo_temperature_neg: float = 1.05  # ... for A <= 0
    vespo_k_pos: float = 2.0  # VESPO's gamma weight for A >= 0: power ...
    vespo_lambda_pos: float = 3.0  # ... and decay
    vespo_k_neg: float = 3.0  # ... for A < 0
    vespo_lambda_neg: float = 2.0
    kl_in_reward: bool = False  # beta x summed KL subtracted from the reward, not added to the loss
    kl_ctrl: str = "fixed"  # fixed | adaptive (kl_in_reward's coefficient, verl's kl_ctrl.type)
    kl_target: float = 0.1  # adaptive: the KL (token mean per sequence) the coefficient steers to
    kl_horizon: int = 10000  # adaptive: samples over which a full 20% correction is applied

    def __attrs_post_init__(self) -> None:
        self._validate_choices()
        self._validate_numbers()
        self.objective(1)  # the objective's own rules (soft-loss parameters, vespo's ratio level)

    def _validate_choices(self) -> None:
        for field, value, valid in (
            ("name", self.name, ALGORITHMS),
            ("advantage", self.advantage, ADVANTAGE_ESTIMATORS),
            ("scale_rewards", self.scale_rewards, SCALE_REWARDS),
            ("kl_estimator", self.kl_estimator, KL_ESTIMATORS),
            ("loss_aggregation", self.loss_aggregation, LOSS_AGGREGATIONS),
            ("policy_loss", self.policy_loss, POLICY_LOSSES),
            ("importance_sampling_level", self.importance_sampling_level, IS_LEVELS),
            ("mismatch_correction", self.mismatch_correction, MISMATCH_CORRECTIONS),
            ("mismatch_level", self.mismatch_level, IS_LEVELS),
            ("kl_ctrl", self.kl_ctrl, KL_CONTROLLERS),
            ("multi_objective_aggregation", self.multi_objective_aggregation, MULTI_OBJECTIVE_AGGREGATIONS),
        ):
            if value not in valid:
                _fail(field, f"unknown {field} {value!r}",
                      trl_value_fix(f"algorithm.{field}", value) or f"use one of {', '.join(valid)}")
        for flag in ("dynamic_sampling", "mask_truncated_completions", "kl_in_reward", "kl_bias_correction"):
            if not isinstance(getattr(self, flag), (bool, np.bool_)):
                _fail(flag, f"must be true or false, got {getattr(self, flag)!r}")

    def _validate_numbers(self) -> None:
        for field in ("epsilon", "beta", "overlong_penalty", "mismatch_cap", "entropy_coef", "top_entropy_quantile",
                      *SOFT_LOSS_FIELDS):
            if not _is_number(getattr(self, field)):
                _fail(field, f"must be a number, got {getattr(self, field)!r}")
        for field in ("epsilon", "epsilon_high", "dual_clip", "beta", "overlong_buffer", "overlong_penalty",
                      "mismatch_cap", "entropy_coef", "top_entropy_quantile", *SOFT_LOSS_FIELDS):
            value = getattr(self, field)
            if _is_number(value) and not fits_float(value):  # nan passes every < and >= test
                _fail(field, f"must be a finite number, got {shown(value)}", "TOML's nan and inf are not valid here")
        if not self.epsilon >= 0:  # 1 or more: the bound 1 - epsilon <= 0 never clips a ratio (TRL takes it)
            _fail("epsilon", f"must be >= 0, got {self.epsilon}", "0.2 is usual")
        if self.epsilon_high is not None and (not _is_number(self.epsilon_high) or self.epsilon_high < 0):
            _fail("epsilon_high", f"must be a number >= 0 or unset, got {self.epsilon_high!r}",
                  "DAPO's clip-higher uses 0.28")
        if self.dual_clip is not None and (not _is_number(self.dual_clip) or self.dual_clip <= 1):
            _fail("dual_clip", f"must be > 1 or unset, got {self.dual_clip!r}", "3.0 is usual")
        opsm = self.off_policy_mask_threshold
        if opsm is not None and (not _is_number(opsm) or not 0 <= float(opsm) < math.inf):
            _fail("off_policy_mask_threshold", f"must be a finite number >= 0 or unset, got {opsm!r}",
                  "0.5 is usual (TRL's example); leave it unset to train every sequence")
        aux = self.router_aux_loss_coef
        if aux is not None and (not _is_number(aux) or not 0 <= float(aux) < math.inf):
            _fail("router_aux_loss_coef", f"must be a finite number >= 0 or unset, got {aux!r}", ROUTER_AUX_FIX)
        if self.entropy_coef < 0:
            _fail("entropy_coef", f"must be >= 0, got {self.entropy_coef}", "0 disables the bonus; 1e-3 is usual")
        if not 0 < self.top_entropy_quantile <= 1:
            _fail("top_entropy_quantile", f"must be in (0, 1], got {self.top_entropy_quantile}",
                  "1.0 trains every token; 0.2 keeps the top 20% highest-entropy tokens")
        if self.mismatch_cap <= 1:
            _fail("mismatch_cap", f"must be > 1, got {self.mismatch_cap}", "2.0 is usual (TRL's cap is 3.0)")
        if self.policy_loss == "cispo" and self.importance_sampling_level != "token":
            _fail("importance_sampling_level", "cispo weights each token by its own ratio; it has no "
                  "sequence-level form", 'use "token" with policy_loss = "cispo"')
        if self.beta < 0:
            _fail("beta", f"must be >= 0, got {self.beta}", "0 disables the KL term")
        if self.kl_in_reward and self.beta == 0:
            _fail("kl_in_reward", "needs beta > 0 (beta is the KL coefficient in the reward)",
                  "set algorithm.beta (e.g. 0.001, verl's kl_coef) or kl_in_reward = false")
        if self.ref_sync_every and self.beta == 0:  # the reference exists only for the KL term
            _fail("ref_sync_every", "refreshes the KL reference, which beta = 0 never uses",
                  "set algorithm.beta > 0 (e.g. 0.04) for a KL term, or ref_sync_every = 0")
        if self.kl_ctrl == "adaptive" and not self.kl_in_reward:
            _fail("kl_ctrl", "the adaptive coefficient steers the KL in the reward only",
                  'set kl_in_reward = true, or kl_ctrl = "fixed"')
        if not _is_number(self.kl_target) or not 0 < self.kl_target < math.inf:
            _fail("kl_target", f"must be a finite number > 0, got {self.kl_target!r}", "verl's default is 0.1")
        if not _is_int(self.kl_horizon) or self.kl_horizon < 1:
            _fail("kl_horizon", f"must be an integer >= 1, got {self.kl_horizon!r}", "verl's default is 10000")
        if self.decouples_rewards:
            self._validate_decoupled()
        if not _is_int(self.num_iterations) or self.num_iterations < 1:
            _fail("num_iterations", f"must be an integer >= 1, got {self.num_iterations!r}")
        if not _is_int(self.minibatches) or self.minibatches < 1:
            _fail("minibatches", f"must be an integer >= 1, got {self.minibatches!r}", "1 (one update per pass) is usual")
        if self.overlong_penalty < 0:
            _fail("overlong_penalty", f"must be >= 0, got {self.overlong_penalty}")
        if self.max_completion_length is not None and (
            not _is_int(self.max_completion_length) or self.max_completion_length < 1
        ):
            _fail("max_completion_length", f"must be an integer >= 1, got {self.max_completion_length!r}",
                  "set it to generation.max_new_tokens")
        buf = self.overlong_buffer
        if buf is not None:
            ok = (_is_int(buf) and buf >= 1) or (_is_number(buf) and not _is_int(buf) and 0 < buf < 1)
            if not ok:
                _fail("overlong_buffer", f"must be an integer >= 1 (tokens) or a fraction in (0, 1), got {buf!r}",
                      "e.g. 0.2 (DAPO's 20%) or 64 tokens; unset disables overlong shaping")
            if _is_int(buf) and self.max_completion_length is not None and buf > self.max_completion_length:
                _fail("overlong_buffer", f"{buf} tokens exceeds max_completion_length={self.max_completion_length}",
                      "use a smaller buffer or a fraction such as 0.2")

    def _validate_decoupled(self) -> None:
        """GDPO normalizes each reward in its group and the sum over the batch: the settings that
        act on the summed reward before its advantage have nothing to act on."""
        other = "use multi_objective_aggregation = 'sum_then_normalize'"
        for field, on, why, fix in (
            ("advantage", self.advantage != "group", f"advantage {self.advantage!r} has no per-reward form",
             f"set advantage = 'group' (the grpo preset's), or {other}"),
            ("overlong_buffer", self.overlong_buffer is not None,
             "overlong shaping adds a penalty to the summed reward, which normalize_then_sum never forms",
             f"remove it (a length reward in [[rewards]] is normalized like the others), or {other}"),
            ("kl_in_reward", self.kl_in_reward,
             "kl_in_reward subtracts the KL from the summed reward, which normalize_then_sum never forms",
             f"set kl_in_reward = false (the KL term in the loss), or {other}"),
        ):
            if on:
                _fail(field, f"cannot be used with multi_objective_aggregation = 'normalize_then_sum': {why}", fix)

    # --- construction --------------------------------------------------------------------------

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> AlgorithmConfig:
        """The named algorithm's defaults, then ``overrides`` (any field; unknown keys raise)."""
        if name not in PRESETS:
            close = difflib.get_close_matches(str(name), ALGORITHMS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            _fail("name", f"unknown algorithm {name!r}", f"{hint}use one of {', '.join(ALGORITHMS)}")
        cls.check_setting_names(overrides)
        refuse_preset_shaping_under_gdpo(name, overrides)
        config = cls(name=name, **{**PRESETS[name], **overrides})
        check_given_keys_act(config, overrides)
        return config

    @classmethod
    def check_setting_names(cls, overrides: Mapping[str, Any]) -> None:
        """One ConfigError for the first key of ``overrides`` that is no algorithm field (a typo
        gets the closest name); ``polyrl.api.GRPOConfig`` checks its ``algorithm.*`` settings with it."""
        fields = sorted(f.name for f in attrs.fields(cls) if f.name != "name")
        for key, value in overrides.items():
            if key not in fields:
                _fail(key, f"unknown algorithm setting {key!r}", unknown_key_fix(key, value, fields))

    # --- derived values ------------------------------------------------------------------------

    @property
    def updates_per_step(self) -> int:
        """Optimizer updates one step makes: ``num_iterations`` passes of ``minibatches`` updates
        (what TRL's ``max_steps`` and the lr schedule count)."""
        return int(self.num_iterations) * int(self.minibatches)

    @property
    def clip_eps_high(self) -> float:
        """The upper clip epsilon in effect (``epsilon_high`` or, when unset, ``epsilon``)."""
        return float(self.epsilon if self.epsilon_high is None else self.epsilon_high)

    def _max_length(self, given: int | None, purpose: str) -> int:
        """The configured ``max_completion_length`` when set (an explicit choice wins), else ``given``."""
        value = self.max_completion_length if self.max_completion_length is not None else given
        if value is None:
            _fail("max_completion_length", f"is needed for {purpose} but is unset",
                  "set algorithm.max_completion_length, or pass generation.max_new_tokens as "
                  "max_completion_length= (the trainer does)")
        if not _is_int(value) or value < 1:
            _fail("max_completion_length", f"must be an integer >= 1, got {value!r}")
        return int(value)

    def overlong_buffer_tokens(self, max_completion_length: int | None = None) -> int | None:
        """The overlong buffer in tokens (a fraction is resolved against the max length)."""
        if self.overlong_buffer is None:
            return None
        length = self._max_length(max_completion_length, "overlong reward shaping (overlong_buffer)")
        buf = self.overlong_buffer
        tokens = int(buf) if _is_int(buf) else max(1, int(round(float(buf) * length)))
        if tokens > length:
            _fail("overlong_buffer", f"{tokens} tokens exceeds the max completion length {length}",
                  "use a smaller buffer or a fraction such as 0.2")
        return tokens

    # --- what the trainer calls ----------------------------------------------------------------

    def objective(self, max_completion_length: int | None = None) -> Objective:
        """The ``Objective`` a backend's ``train_step`` optimises for this algorithm."""
        kwargs: dict[str, Any] = {}
        if self.loss_aggregation == "seq_mean_token_sum_norm":
            kwargs["max_completion_length"] = self._max_length(
                max_completion_length, "Dr.GRPO's constant normaliser (seq_mean_token_sum_norm)"
            )
        elif max_completion_length is not None or self.max_completion_length is not None:
            kwargs["max_completion_length"] = self._max_length(max_completion_length, "the objective")
        kwargs.update({name: float(getattr(self, name)) for name in SOFT_LOSS_FIELDS})
        return Objective(
            clip_eps_low=float(self.epsilon),
            clip_eps_high=self.clip_eps_high,
            dual_clip=None if self.dual_clip is None else float(self.dual_clip),
            beta=0.0 if self.kl_in_reward else float(self.beta),  # in the reward, not the loss
            kl_estimator=self.kl_estimator,
            kl_bias_correction=bool(self.kl_bias_correction),
            loss_aggregation=self.loss_aggregation,
            policy_loss=self.policy_loss,
            importance_sampling_level=self.importance_sampling_level,
            mismatch_correction=self.mismatch_correction,
            mismatch_level=self.mismatch_level,
            mismatch_cap=float(self.mismatch_cap),
            entropy_coef=float(self.entropy_coef),
            top_entropy_quantile=float(self.top_entropy_quantile),
            off_policy_mask_threshold=(None if self.off_policy_mask_threshold is None
                                       else float(self.off_policy_mask_threshold)),
            router_aux_loss_coef=(None if self.router_aux_loss_coef is None
                                  else float(self.router_aux_loss_coef)),
            **kwargs,
        )

    @property
    def decouples_rewards(self) -> bool:
        """Whether each reward is normalized on its own (GDPO), so the advantages need every
        reward's scores (``decoupled_advantages``) rather than their weighted sum."""
        return self.multi_objective_aggregation == "normalize_then_sum"

    def advantages(self, rewards: np.ndarray | list[float], group_size: int) -> np.ndarray:
        """One advantage per sample (NaN rewards -> 0); see ``polyrl.algorithms.advantages``."""
        return compute_advantages(rewards, group_size, self.advantage, self.scale_rewards)

    def decoupled_advantages(self, per_reward: np.ndarray, weights: list[float], group_size: int) -> np.ndarray:
        """GDPO's advantages from each reward's scores ``(samples, rewards)`` and their weights."""
        return decoupled_advantages(per_reward, weights, group_size)

    def needs_groups(self) -> tuple[str, str] | None:
        """(why, fix) where this configuration needs two or more samples per prompt, None where one
        trains: REINFORCE's batch-mean baseline compares across prompts, every other estimator within one."""
        if self.advantage in GROUP_RELATIVE_ADVANTAGES:
            return (f"{self.name}'s advantage ({self.advantage!r}) compares the samples of one prompt, so a single "
                    "sample always gets 0 and nothing trains",
                    'use 2 or more (4 to 16 is usual), or algorithm.name = "reinforce" (a batch-mean baseline)')
        if self.scale_rewards == "group":
            return ('scale_rewards = "group" divides by the std of one prompt\'s samples, 0 for a single one',
                    'use 2 or more, or algorithm.scale_rewards = "batch" or "none"')
        if self.dynamic_sampling:
            return ("dynamic_sampling drops every group whose rewards are all equal, as a single sample's are",
                    "use 2 or more, or algorithm.dynamic_sampling = false")
        return None

    def keep_mask(self, rewards: np.ndarray | list[float], group_size: int) -> np.ndarray:
        """Per-sample bool mask of samples worth training on (DAPO dynamic sampling when on)."""
        groups = as_groups(rewards, group_size)
        if not self.dynamic_sampling:
            return np.ones(groups.size, dtype=bool)
        return expand_group_mask(dynamic_sampling_mask(rewards, group_size), group_size)

    def decoupled_keep_mask(self, per_reward: np.ndarray, weights: list[float], group_size: int) -> np.ndarray:
        """``keep_mask`` under GDPO: a group is worth training on when any weighted reward varies in
        it, since each reward is normalized in its group before the sum. Judged on the weighted sum
        (as ``keep_mask``), a group whose rewards trade off exactly (correct but long vs wrong but
        short: the same sum) was dropped though its GDPO advantages are not zero."""
        scores = np.asarray(per_reward, dtype=np.float64)
        if not self.dynamic_sampling:
            return np.ones(scores.shape[0], dtype=bool)
        varies = np.zeros(scores.shape[0] // group_size, dtype=bool)
        for column, weight in zip(scores.T, weights):
            if weight != 0:
                varies |= dynamic_sampling_mask(column, group_size)
        return expand_group_mask(varies, group_size)

    def loss_selection(self, scores: np.ndarray, shaped: np.ndarray, untruncated: np.ndarray, group_size: int,
                       per_reward: np.ndarray | None, weights: list[float],
                       barred: np.ndarray | None = None,
                       router: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which completions a loss trains on and with what advantage, one rule for the training
        step and the eval loss so the two cannot drift: ``(keep, advantages, group_kept)``.
        ``keep`` is the groups dynamic sampling keeps (``group_kept``, which the loss divisors count
        whole as TRL's batch does, less the ``barred`` rows), less the completions cut under
        ``mask_truncated_completions`` (``untruncated``) and the unscored ones, except that with the
        KL term or an entropy bonus in the loss, or ``top_entropy_quantile`` < 1 (whose threshold
        TRL takes over their tokens too), a completion no reward scored (``scores`` NaN) stays
        at advantage 0 for those terms, as in TRL (its unscored rows, multi-turn ones too, stay in
        the loss, their advantage 0). ``barred`` (per sample, None: none) marks the rows no term
        trains: episodes that ended in an environment error or hold nothing to train
        (``step_gather.out_of_loss``; TRL's run stops there), so no divisor counts them either
        (their tokens are no trained tokens). ``router``: the loss holds a MoE model's router term,
        which TRL takes over every row of its batch, an unscored one's prompt and completion too, so
        such a row stays in as for the KL term. ``per_reward`` (samples x rewards): GDPO's matrix,
        else None. An advantage past float64's range comes back inf, for the caller to refuse."""
        with np.errstate(over="ignore"):
            if per_reward is not None:
                group_kept = self.decoupled_keep_mask(per_reward, weights, group_size)
                advantages = self.decoupled_advantages(per_reward, weights, group_size)
            else:
                group_kept = self.keep_mask(shaped, group_size)
                advantages = self.advantages(shaped, group_size)
        # an unscored row stays at advantage 0 (its policy term 0) where the loss reads more of it than
        # that term: the KL term, the entropy bonus, the router term, and, in a step that trains any
        # row, the tokens top_entropy_quantile ranks (TRL's threshold is a quantile over every token
        # of its micro-batch, an unscorable row's too; with none scored its whole loss is 0)
        unscored = np.isnan(scores)
        ranked = self.top_entropy_quantile < 1.0 and not unscored.all()
        other_terms = (self.beta > 0 and not self.kl_in_reward) or self.entropy_coef > 0 or router or ranked
        kl_only = unscored & other_terms
        if barred is not None:  # not in TRL's batch either (its run stops): no divisor counts them
            group_kept = group_kept & ~np.asarray(barred, dtype=bool)
        keep = group_kept & (np.isfinite(shaped) | kl_only) & untruncated
        return keep, advantages, group_kept

    def untruncated_mask(self, finish_reasons: list[str]) -> np.ndarray:
        """Per-sample bool mask: with ``mask_truncated_completions``, False for completions cut at
        the length limit (their reward judges an unfinished answer; DAPO and TRL leave them out of
        the loss). They still count in the group's advantage baseline, as in TRL."""
        reasons = np.asarray(finish_reasons, dtype=object)
        if not self.mask_truncated_completions:
            return np.ones(len(reasons), dtype=bool)
        return reasons != "length"

    def shape_rewards(
        self,
        rewards: np.ndarray | list[float],
        lengths: np.ndarray | list[int],
        max_completion_length: int | None = None,
    ) -> np.ndarray:
        """Rewards after DAPO overlong shaping (a float64 copy when shaping is off)."""
        r = np.asarray(rewards, dtype=np.float64).reshape(-1).copy()
        buffer = self.overlong_buffer_tokens(max_completion_length)
        if buffer is None:
            return r
        length = self._max_length(max_completion_length, "overlong reward shaping")
        return shape_overlong(r, lengths, length, buffer, float(self.overlong_penalty))
