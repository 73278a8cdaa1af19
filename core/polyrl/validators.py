"""Range rules for every numeric config field, checked in one place for every way a config is made.

Why a table rather than checks scattered over the section classes: the hostile cases (``nan``,
``inf``, a negative seed, ``max_grad_norm = -1``) are the same kind of mistake in every section, so
one rule type gives one kind of message (``optimizer.lr: must be a finite number > 0, got nan.
Fix: ...``), and a test can walk every numeric attrs field of every section and insist it has a
rule here. ``check_record`` runs from ``RunConfig.__attrs_post_init__``, so TOML files, the Python
API and ``attrs.evolve`` overrides (``polyrl train --steps``) are all checked.

Free-form tables (``backends.options``, ``data.options``, ``[[rewards]].options``) belong to a
backend, a task or a reward that validates its own keys; here they only get the generic checks
that no owner could want to skip: numbers are finite and nesting is shallow.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from polyrl import long_numbers
from polyrl.errors import ConfigError

#: TOML lets a table nest without limit; the parser and everything that walks a config recurse,
#: so a bound far above any real config turns a RecursionError into a ConfigError.
MAX_NESTING = 32
#: Above any model's context today; a larger value would only fail later inside an allocator.
MAX_TOKENS = 1 << 20
#: Far above any real rollout batch (TRL's largest are a few thousand samples); a larger value only
#: grows memory for hours inside one step, which a stop request waits for.
MAX_PROMPTS_PER_STEP = 65536
#: Updates on one rollout batch (``algorithm.num_iterations``): far above any recipe (TRL's use 1-4);
#: 2**40 was accepted and one step then trained on its batch for the rest of the machine's life.
MAX_UPDATES_PER_BATCH = 1024
#: numpy's seed range (torch accepts more, numpy does not).
MAX_SEED = 2**32 - 1
#: AdamW's update moves every weight by about ``lr`` per step whatever the gradient's size (its
#: first step is exactly ``lr`` x the gradient's sign), and a network's weights are well below 1:
#: an lr of 10 or more rewrites every weight each step, and what is written is a lost minus sign
#: (``5e6`` for ``5e-6``). Values from 1 to 10 stay open: tiny test models and the toy backend's
#: table of logits train there on purpose.
MAX_LR = 10.0
#: A reward weight scales its reward against the others; one past 1e100 overflows float64 (the
#: weighted total inf, or NaN where two such weights of opposite sign meet) for scores of ordinary
#: size (1e308 x 2), and then the run stopped, or a sample read as unscored, after the models loaded.
#: Within it, scores up to 1e100 (``safe_stats.SAFE_MAGNITUDE``) times their weights sum finite.
MAX_REWARD_WEIGHT = 1e100
#: Seconds any wait may be set to (about 31 years). Why: torch's process group takes its timeout as a
#: ``timedelta``, which ``train.collective_timeout_s = 1e308`` (or 1e14) overflowed: a traceback on
#: every rank under ``polyrl launch``; Python's timed waits (a thread's join, a socket) overflow past
#: about 9.2e9 s too. No wait meant as finite is longer.
MAX_WAIT_S = 1e9


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error line stays one readable line.

    An int past Python's digit limit (``10**5000`` from a Python API such as ``trl.GRPOConfig``)
    has no ``repr``: its ``ValueError`` was the traceback instead of the error line it belonged in."""
    try:
        text = repr(value)
    except ValueError as exc:
        if not long_numbers.is_digit_limit(exc):
            raise
        past = f"more than the {long_numbers.digit_limit()} Python reads"
        if isinstance(value, int):
            return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits, {past}"
        return f"a {type(value).__name__} holding an integer of too many digits, {past}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fits_float(value: Any) -> bool:
    """Whether the number ``value`` is one a float holds: finite, and an int within float range.

    Why: an int is finite but ``float(10**5000)`` raises ``OverflowError``, a traceback wherever a
    real-valued setting (a learning rate, a temperature) is used as a float."""
    if isinstance(value, int):
        return -sys.float_info.max <= value <= sys.float_info.max
    return math.isfinite(value)


def _show(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 1e16 else f"{bound:g}"


@attrs.frozen
class Rule:
    """A numeric field's type and range (``None`` bound: unbounded; ``*_open``: strict)."""

    integer: bool
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    optional: bool = False  # None (unset) is allowed
    fix: str | None = None
    #: a fix for the value given, before ``fix`` (the intended lr of a mistyped exponent)
    hint: Callable[[Any], str | None] | None = None

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"{kind} in {left}{_show(self.low)}, {_show(self.high)}{right}"
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {_show(self.low)}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {_show(self.high)}"
        return kind

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if not self.integer and not fits_float(value):  # nan, inf, or an int no float holds (10**5000)
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def check(self, value: Any, field: str) -> None:
        if not self.accepts(value):
            unset = " or unset" if self.optional else ""
            fix = (self.hint(value) if self.hint is not None else None) or self.fix
            raise ConfigError(f"must be {self.describe()}{unset}, got {shown(value)}", field=field, fix=fix)


def intended_lr(value: Any) -> str | None:
    """The learning rate a too-large ``value`` most likely meant, as TOML writes it: its exponent's
    minus sign put back (``5e6`` -> ``"5e-6"``), when that lands where learning rates are (1e-8 to 0.1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not fits_float(value) or value < MAX_LR:
        return None
    mantissa, _, exponent = f"{float(value):e}".partition("e")
    guess = f"{mantissa.rstrip('0').rstrip('.')}e-{int(exponent)}"
    return guess if 1e-8 <= float(guess) <= 0.1 else None


def lr_fix(value: Any) -> str | None:
    """The fix for an lr of ``MAX_LR`` or more: the value it most likely meant, else the usual ones."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not fits_float(value) or value < MAX_LR:
        return None
    why = f"AdamW moves every weight by about lr per update, so {shown(value)} would wipe out the model in one step"
    guess = intended_lr(value)
    if guess is not None:
        return f"did you mean {guess} (the exponent's minus sign lost)? write lr = {guess}; {why}"
    return f"e.g. lr = 1e-5 (full fine-tuning) or 1e-4 (LoRA); {why}"


def _int(low: int | None = None, high: float | None = None, **kw: Any) -> Rule:
    return Rule(integer=True, low=low, high=high, **kw)


def _float(low: float | None = None, high: float | None = None, **kw: Any) -> Rule:
    return Rule(integer=False, low=low, high=high, **kw)


#: Every numeric field of every section, by dotted path (``rewards`` covers each ``[[rewards]]``).
RULES: dict[str, Rule] = {
    "model.max_length": _int(2, MAX_TOKENS, fix="prompt + completion tokens, e.g. 1024; at most "
                                                "the model's context length"),
    "generation.group_size": _int(1, 65536, fix="4 to 16 is usual; 1 only for REINFORCE (every other "
                                                "advantage compares the samples of one prompt)"),
    "generation.max_new_tokens": _int(1, MAX_TOKENS, fix="e.g. 64; it must also stay below model.max_length"),
    "generation.temperature": _float(0, fix="0 is greedy, 1.0 samples the model as is"),
    "generation.top_p": _float(0, 1, low_open=True, fix="1.0 disables nucleus sampling"),
    "generation.top_k": _int(0, fix="0 disables top-k"),
    "generation.min_p": _float(0, 1, fix="0 disables min-p; e.g. 0.05"),
    "generation.repetition_penalty": _float(0, low_open=True, fix="1.0 disables it; e.g. 1.1"),
    "algorithm.epsilon": _float(0, fix="0.2 is usual; 1 or more leaves the lower side unclipped (TRL's DeepSeek-R1 "
                                       "recipe writes 10)"),
    "algorithm.epsilon_high": _float(0, optional=True, fix="DAPO's clip-higher uses 0.28"),
    "algorithm.dual_clip": _float(1, low_open=True, optional=True, fix="3.0 is usual"),
    "algorithm.beta": _float(0, fix="0 disables the KL term; 0.04 is usual with a reference"),
    "algorithm.num_iterations": _int(1, MAX_UPDATES_PER_BATCH, fix="1 (on-policy) is usual; TRL's examples use up to 4"),
    "algorithm.minibatches": _int(1, fix="1 (one update per pass over the step's batch) is usual"),
    "algorithm.overlong_buffer": _float(0, low_open=True, optional=True,
                                        fix="a fraction such as 0.2 or a token count such as 64"),
    "algorithm.overlong_penalty": _float(0, fix="1.0 is DAPO's"),
    "algorithm.mismatch_cap": _float(1, low_open=True, fix="2.0 is usual (TRL's cap is 3.0)"),
    "algorithm.entropy_coef": _float(0, fix="0 disables the bonus; 1e-3 is usual"),
    "algorithm.router_aux_loss_coef": _float(0, optional=True, fix="leave it unset for the model's own "
                                                                    "coefficient; 0 turns it off"),
    "algorithm.top_entropy_quantile": _float(0, 1, low_open=True, fix="1.0 trains every token; 0.2 is the paper's"),
    "algorithm.off_policy_mask_threshold": _float(0, optional=True,
                                                  fix="0.5 is usual (TRL's example); leave it unset to train "
                                                      "every sequence"),
    "algorithm.max_completion_length": _int(1, MAX_TOKENS, optional=True,
                                            fix="set it to generation.max_new_tokens or leave it unset"),
    "optimizer.lr": _float(0, MAX_LR, low_open=True, high_open=True, hint=lr_fix,
                           fix="e.g. lr = 1e-5 (full fine-tuning) or 1e-4 (LoRA)"),
    "optimizer.weight_decay": _float(0, fix="0.0 or e.g. 0.01"),
    "optimizer.eps": _float(0, 1, low_open=True, fix="AdamW's eps, e.g. 1e-8"),
    "optimizer.max_grad_norm": _float(0, low_open=True, optional=True,
                                      fix="a clipping norm such as 1.0, or remove the key to disable clipping"),
    "optimizer.micro_batch_size": _int(1, optional=True,
                                       fix="sequences per forward/backward, e.g. 4; unset = whole batch"),
    "lora.rank": _int(1, 4096, fix="e.g. 16"),
    "lora.alpha": _float(0, low_open=True, fix="e.g. 32 (twice the rank)"),
    "lora.dropout": _float(0, 1, high_open=True, fix="0.0 or e.g. 0.05"),
    "algorithm.ref_sync_every": _int(0, fix="0 never refreshes the reference; e.g. 64"),
    "algorithm.ref_sync_alpha": _float(0, 1, low_open=True, fix="1.0 copies the policy; TRL's default is 0.6"),
    "algorithm.sapo_temperature_pos": _float(0, low_open=True, fix="TRL's default is 1.0"),
    "algorithm.sapo_temperature_neg": _float(0, low_open=True, fix="TRL's default is 1.05"),
    "algorithm.vespo_k_pos": _float(0, fix="TRL's default is 2.0"),
    "algorithm.vespo_lambda_pos": _float(0, low_open=True, fix="TRL's default is 3.0"),
    "algorithm.vespo_k_neg": _float(0, fix="TRL's default is 3.0"),
    "algorithm.vespo_lambda_neg": _float(0, low_open=True, fix="TRL's default is 2.0"),
    "algorithm.kl_target": _float(0, low_open=True, fix="verl's default is 0.1"),
    "algorithm.kl_horizon": _int(1, fix="verl's default is 10000"),
    "optimizer.warmup_steps": _int(0, fix="0 disables warmup; e.g. warmup_steps = 10"),
    "optimizer.min_lr_ratio": _float(0, 1, fix="0.0 decays to zero; e.g. 0.1 ends at lr / 10"),
    "optimizer.total_steps": _int(1, optional=True,
                                  fix="leave it unset (train.steps x algorithm.num_iterations x algorithm.minibatches)"),
    "train.steps": _int(1, 10**9, fix="e.g. steps = 100"),
    "train.prompts_per_step": _int(1, MAX_PROMPTS_PER_STEP, fix="e.g. 8; a step samples group_size completions of each"),
    "train.seed": _int(0, MAX_SEED, fix="any whole number from 0 to 2**32 - 1"),
    "train.threads": _int(1, 4096, optional=True, fix="CPU threads for this process; unset = all cores"),
    "train.checkpoint_every": _int(0, fix="0 saves only at the end"),
    "train.keep_checkpoints": _int(0, fix="e.g. 2; 0 keeps every checkpoint"),
    "train.keep_previous_runs": _int(0, fix="earlier runs to keep in output_dir/previous/, e.g. 1; "
                                            "0 deletes an earlier run instead of moving it aside"),
    "train.max_consecutive_skips": _int(1, fix="e.g. 3"),
    "train.collective_timeout_s": _float(0, MAX_WAIT_S, low_open=True, fix="seconds a rank may wait for the others, e.g. 600"),
    "eval.count": _int(0, 1_000_000, fix="0 disables evaluation; e.g. 100 held-out prompts"),
    "eval.every": _int(0, fix="0 evaluates only before and after training"),
    "eval.max_new_tokens": _int(1, MAX_TOKENS, optional=True, fix="unset uses generation.max_new_tokens"),
    "eval.samples": _int(0, 4096, fix="sampled completions per prompt for pass@k, e.g. 8; 0 evaluates greedily only"),
    "eval.pass_k": _int(1, 4096, fix="k of pass@k, at most eval.samples, e.g. 1 or 4"),
    "eval.loss_batch": _int(0, 1_000_000, fix="a multiple of eval.samples, e.g. 8; 0 takes the whole eval set as one batch"),
    "eval.pass_threshold": _float(fix="the eval reward at or above which a sample is correct, e.g. 1.0"),
    "logging.completions_per_step": _int(0, 4096, fix="e.g. 4; 0 turns the completions log off"),
    "logging.tracker_timeout_s": _float(0, MAX_WAIT_S, low_open=True, fix="seconds one tracker call may take, e.g. 60"),
    "logging.table_cell_chars": _int(0, fix="characters of one completions table cell, e.g. 16384; 0 leaves cells uncut"),
    "environment.max_turns": _int(1, 1024, fix="assistant turns per episode, e.g. 4"),
    "environment.max_episode_tokens": _int(1, MAX_TOKENS, fix="tokens after the first prompt, e.g. 512"),
    "environment.tool_timeout_s": _float(0, MAX_WAIT_S, low_open=True, fix="seconds per tool call, e.g. 10"),
    "environment.env_timeout_s": _float(0, MAX_WAIT_S, low_open=True, fix="seconds per environment call (reset, step), e.g. 60"),
    "environment.max_concurrent_tools": _int(1, 4096, fix="tool calls at once across a step, e.g. 8"),
    "environment.max_tool_calls_per_turn": _int(1, 1024, fix="tool calls run per assistant turn, e.g. 8"),
    "rewards.weight": _float(-MAX_REWARD_WEIGHT, MAX_REWARD_WEIGHT,
                             fix="e.g. 1.0; a negative weight penalises; scale the reward's scores instead of "
                                 "a weight past 1e100"),
    "rewards.timeout_s": _float(0, MAX_WAIT_S, low_open=True, optional=True,
                                fix="seconds one reward call may take, e.g. timeout_s = 600; unset lets polyrl size it"),
}

#: Pairs (the AdamW betas) checked element by element.
PAIR_RULES: dict[str, Rule] = {
    "optimizer.betas": _float(0, 1, high_open=True, fix="AdamW's betas, e.g. [0.9, 0.999]"),
}

#: Free-form tables that only get the generic checks.
FREE_TABLES: tuple[str, ...] = ("backends.options", "data.options", "data.columns", "rewards.options",
                                "environment.options", "model.chat_template_kwargs")


def rule_key(path: str) -> str:
    """``rewards[2].weight`` -> ``rewards.weight`` (one rule for every entry of an array)."""
    head, _, tail = path.partition("[")
    return head + tail.partition("]")[2] if tail else head


def check_record(record: Any, path: str) -> None:
    """Apply the rules to every field of the attrs ``record`` that lives at ``path``."""
    for field in attrs.fields(type(record)):
        dotted = f"{path}.{field.name}"
        key = rule_key(dotted)
        value = getattr(record, field.name)
        if key in RULES:
            RULES[key].check(value, dotted)
        elif key in PAIR_RULES:
            check_pair(PAIR_RULES[key], value, dotted)
        elif key in FREE_TABLES:
            check_free(value, dotted)


def check_pair(rule: Rule, value: Any, field: str) -> None:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"must be a pair of numbers, got {shown(value)}", field=field, fix=rule.fix)
    for i, item in enumerate(value):
        rule.check(item, f"{field}[{i}]")


def check_free(value: Any, field: str, depth: int = 0) -> None:
    """Numbers in a free-form table are finite; nesting stays under ``MAX_NESTING``."""
    if depth > MAX_NESTING:
        raise ConfigError(f"is nested more than {MAX_NESTING} levels deep", field=field,
                          fix="flatten the table; no polyrl setting nests that deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {shown(value)}", field=field,
                          fix="TOML's nan and inf are not valid settings; write a number")
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_free(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_free(item, f"{field}[{i}]", depth + 1)


def check_depth(value: Any, field: str, depth: int = 0) -> None:
    """Reject a raw TOML document nested deeper than ``MAX_NESTING`` before anything walks it."""
    if depth > MAX_NESTING:
        raise ConfigError(f"is nested more than {MAX_NESTING} levels deep", field=field,
                          fix="flatten the table; no polyrl setting nests that deep")
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_depth(item, f"{field}.{key}" if field else str(key), depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_depth(item, f"{field}[{i}]", depth + 1)
