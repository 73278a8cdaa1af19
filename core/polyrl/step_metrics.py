"""The per-step numbers users of TRL and verl look for, computed from what a step already has.

Names follow TRL's GRPOTrainer where it has one (``completions/mean_length``,
``completions/clipped_ratio``, ``frac_reward_zero_std``) so dashboards and habits carry over; the
throughput and memory keys follow verl's ``perf/`` prefix. Everything here is cheap arithmetic on
numpy arrays: no backend call, so every backend reports the same keys.
"""

from __future__ import annotations

import math
import resource
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from polyrl.algorithms.objective import Objective
from polyrl.step_gather import Shard


def completion_metrics(shard: Shard) -> dict[str, float]:
    """Length statistics of the step's completions (every rank's: ``polyrl.step_gather``);
    ``clipped_ratio`` is the share cut off by ``max_new_tokens`` (finish reason ``length``) rather
    than ending on their own."""
    if not shard.size:
        return {}
    lengths = shard.completion_len.astype(np.float64)
    return {
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float(shard.clipped.mean()),
        **terminated_length_metrics(shard),
    }


def terminated_length_metrics(shard: Shard) -> dict[str, float]:
    """TRL's ``completions/{mean,min,max}_terminated_length``: the lengths of the completions that
    ended on their own (not cut by ``max_new_tokens``), counted as ``completions/mean_length``
    counts; 0 when every completion was cut, as TRL logs then."""
    if not shard.size:
        return {}
    ended = shard.completion_len[~shard.clipped].astype(np.float64)
    if not ended.size:
        ended = np.zeros(1)
    return {"completions/mean_terminated_length": float(ended.mean()),
            "completions/min_terminated_length": float(ended.min()),
            "completions/max_terminated_length": float(ended.max())}


def step_tokens(shard: Shard) -> int:
    """What TRL's ``num_tokens`` adds for a step: every completion's prompt and sampled tokens, on
    every rank (an episode's inserted tokens, which TRL leaves out with tools, are not counted)."""
    return int((shard.sequence_len - shard.completion_len + shard.sampled_len).sum())


def no_loss_token_metrics(kl_in_loss: bool, objective: Objective) -> dict[str, float | None]:
    """What TRL logs for a step whose every completion was cut under ``mask_truncated_completions``
    (no loss token in its batch): its loss and every masked mean divide by at least 1
    (``_compute_loss``), so ``loss``, ``grad_norm`` (the gradient of 0 is 0), ``entropy``, ``kl``
    where the loss holds a KL term (``beta > 0``) and, for its clipped-ratio losses (polyrl's
    ``ppo``), ``clip_ratio/low_mean``, ``/high_mean`` and ``/region_mean`` are 0. Its
    ``clip_ratio/low_min`` and ``/high_max`` are each completion's share over its own tokens: 0/0
    for every row at the token level, which TRL's ``nanmin`` returns as NaN and its ``log`` writes
    as None; at the sequence level one ratio per completion, 0. VESPO's ``vespo/phi_seq_mean`` is
    1.0 (no mismatch correction: every row's sequence log-ratio sums no token). Why: the step logged loss NaN
    (``train_loss`` NaN too, under ``polyrl.trl``) and lacked keys a dashboard or callback reads
    every step."""
    out: dict[str, float | None] = {"loss": 0.0, "grad_norm": 0.0, "entropy": 0.0,
                                    **({"kl": 0.0} if kl_in_loss else {})}
    if objective.policy_loss == "ppo":
        extreme = 0.0 if objective.importance_sampling_level == "sequence" else None
        out.update({"clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/region_mean": 0.0,
                    "clip_ratio/low_min": extreme, "clip_ratio/high_max": extreme})
    elif objective.policy_loss == "cispo":  # TRL's cispo_clip_ratio, a masked mean over no token: 0
        out["cispo_clip_ratio"] = 0.0
    elif objective.policy_loss == "vespo" and not objective.corrects_mismatch:
        out["vespo/phi_seq_mean"] = 1.0  # no token: each row's log w is 0, its weight e^(lambda - lambda)
    return out


def nothing_scored_metrics(objective: Objective) -> dict[str, float]:
    """What TRL logs for a step no reward scored whose loss holds no KL term (``beta`` 0): it trains
    the batch with every advantage 0 (``nan_to_num`` of the unscorable rewards), so ``loss`` is 0.0
    and so is its gradient (``grad_norm``); for its clipped-ratio losses (polyrl's ``ppo``) no token
    is clipped (a clip needs a nonzero advantage), so every ``clip_ratio/`` value is 0.0, the
    per-completion ``low_min`` and ``high_max`` too. TRL's ``entropy`` (its forward over the
    batch) comes from the trainer's zero-gradient updates over that batch (``_idle_updates``),
    not from here. Why: the step logged loss NaN and
    lacked the ``clip_ratio/`` keys a dashboard or callback reads every step."""
    out = {"loss": 0.0, "grad_norm": 0.0}
    if objective.policy_loss == "ppo":
        out.update(dict.fromkeys(("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                                  "clip_ratio/low_min", "clip_ratio/high_max"), 0.0))
    elif objective.policy_loss == "cispo":  # a clip needs a positive advantage: TRL's cispo_clip_ratio 0
        out["cispo_clip_ratio"] = 0.0
    return out


def trl_epoch(steps_done: int, prompts_per_step: int, rows: int, start: tuple[int, int] | None = None) -> float:
    """TRL's ``epoch`` after ``steps_done`` steps: its sampler keeps whole batches of
    ``prompts_per_step`` prompts only, so an epoch is ``rows // prompts_per_step`` steps (the count
    ``polyrl.api.epoch_steps`` turns ``num_train_epochs`` into). polyrl's sampler draws the rest
    too (a batch runs into the next epoch), so with ``rows`` not a multiple of ``prompts_per_step``
    this runs ahead of the rows drawn, exactly as TRL's does; fewer rows than a batch: rows drawn
    over rows. ``start``: the sampler's (epoch, position) where the last step's prompts started;
    with ``rows`` a multiple of ``prompts_per_step`` the epoch is read from it (the same number
    without an epoch stop; after one, transformers' count: the epochs begun, plus this one's share;
    otherwise ``steps_done`` counts the steps epoch stops skipped too, ``epoch_stop_skips``)."""
    if start is not None and rows % max(prompts_per_step, 1) == 0 and prompts_per_step <= rows:
        return (start[0] * rows + start[1] + prompts_per_step) / rows  # = steps_done / whole, as rounded
    whole = rows // max(prompts_per_step, 1)
    return steps_done / whole if whole else steps_done * prompts_per_step / max(rows, 1)


def epoch_stop_skips(steps_counted: int, prompts_per_step: int, rows: int) -> int:
    """The steps of TRL's epoch an epoch stop (transformers' ``control.should_epoch_stop``) leaves
    out after ``steps_counted`` (the steps ``trl_epoch`` counts so far): the rest of the epoch's
    ``rows // prompts_per_step`` steps, 0 at its end. Why: transformers' ``state.epoch`` is the
    epochs begun plus this one's share, and a ``num_train_epochs`` run ends after its last epoch;
    counting the skipped steps keeps ``trl_epoch`` on that count when the sampler's position
    cannot tell it (``rows`` not a whole number of batches)."""
    whole = rows // max(prompts_per_step, 1)
    return (whole - steps_counted % whole) % whole if whole else 0


#: polyrl's step metric -> TRL's GRPOTrainer name for the same value (both are logged).
TRL_ALIASES = {"reward_mean": "reward", "lr": "learning_rate"}


def trl_aliases(metrics: Mapping[str, Any], names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """TRL's names for what the step has under polyrl's: ``reward``, ``learning_rate`` and each
    reward's ``rewards/<name>/mean`` and ``/std`` (its raw, unweighted scores, NaN ignored), so a
    dashboard or habit from TRL finds them; polyrl's own names stay. ``names``: a reward label's
    TRL name where it differs (``trl_reward_names``)."""
    out = {trl: metrics[ours] for ours, trl in TRL_ALIASES.items() if ours in metrics}
    out.update(_per_reward(metrics, 3, ["reward"], "rewards/", names))
    return out


def _per_reward(metrics: Mapping[str, Any], parts_count: int, head: list[str], prefix: str,
                names: Mapping[str, str] | None) -> dict[str, Any]:
    """Each reward's ``mean`` and ``std`` (keys ``head/<label>/mean``) as ``<prefix><name>/mean``
    under its TRL name. Labels TRL names alike (one function passed twice: TRL names both ``f``)
    share the key, holding the mean of their numbers, NaN left out, as TRL's ``log`` averages the
    values it appended to one metric name."""
    grouped: dict[str, list[Any]] = {}
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == parts_count and parts[:-2] == head and parts[-1] in ("mean", "std"):
            name = (names or {}).get(parts[-2], parts[-2])
            grouped.setdefault(f"{prefix}{name}/{parts[-1]}", []).append(value)
    return {key: values[0] if len(values) == 1 else _mean_of(values) for key, values in grouped.items()}


def _mean_of(values: Sequence[Any]) -> Any:
    """The mean of the numbers among ``values`` that are not NaN; None when there are none (TRL's
    ``log`` for a metric with no valid value)."""
    valid = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
    return sum(valid) / len(valid) if valid else None


class TrlRewardName:
    """A reward's TRL name where no plugin carries it: a reward model entry of ``reward_funcs`` is
    a ``[[rewards]]`` section of polyrl's ``reward_model`` (labelled ``reward_model``,
    ``reward_model_2``...), which TRL logs under the basename of its folder or of its model
    object's ``config._name_or_path``. ``api.reward_entries`` returns it among the reward function
    plugins; the Trainer reads it with ``trl_reward_names`` and registers it as no plugin."""

    __slots__ = ("name", "trl_name")

    def __init__(self, name: str, trl_name: str) -> None:
        self.name = name  # the reward's label
        self.trl_name = trl_name

    def __repr__(self) -> str:
        return f"TrlRewardName({self.name!r}, {self.trl_name!r})"


def trl_reward_names(plugins: Sequence[Any]) -> dict[str, str]:
    """Reward label -> the name TRL logs it under, where they differ: a function given twice
    through the Python API is labelled ``f`` and ``f_2`` (polyrl's labels must differ) and TRL
    names both ``f`` (``FunctionReward.trl_name``); a reward model is labelled ``reward_model``
    and TRL names it after its folder (``TrlRewardName``)."""
    out: dict[str, str] = {}
    for plugin in plugins:
        label, trl_name = getattr(plugin, "name", None), getattr(plugin, "trl_name", None)
        if isinstance(label, str) and isinstance(trl_name, str) and trl_name != label:
            out[label] = trl_name
    return out


def trl_step_time(step_seconds: float, updates: int) -> float:
    """TRL's ``step_time``: the wall seconds of one optimizer update (its ``training_step`` calls
    for the update, the sampling of a new generation batch included), here the step's mean over
    the ``updates`` it makes (``num_iterations`` x ``minibatches``): what TRL logs with
    ``logging_steps`` at that many. Why: TRL's dashboards and scripts plot it."""
    return round(step_seconds / max(updates, 1), 4)


#: polyrl's evaluation metric -> TRL's name for it in an eval entry of ``log_history`` (each reward's
#: ``eval/reward/<f>/mean`` and ``/std`` are ``eval_rewards/<f>/mean`` and ``/std``)
TRL_EVAL_ALIASES = {"eval/sampled_reward_mean": "eval_reward", "eval/sampled_reward_std": "eval_reward_std",
                    "eval/completion_len_mean": "eval_completions/mean_length", "eval/loss": "eval_loss",
                    **{f"eval/{ours}": f"eval_{trl}" for ours, trl in (
                        ("completion_len_min", "completions/min_length"),
                        ("completion_len_max", "completions/max_length"),
                        ("clipped_ratio", "completions/clipped_ratio"),
                        ("terminated_len_mean", "completions/mean_terminated_length"),
                        ("terminated_len_min", "completions/min_terminated_length"),
                        ("terminated_len_max", "completions/max_terminated_length"),
                        ("frac_reward_zero_std", "frac_reward_zero_std"))},
                    "eval/kl": "eval_kl", "eval/policy_loss": "eval_policy_loss", "eval/entropy": "eval_entropy",
                    **{f"eval/{key}": f"eval_{key}" for key in (
                        "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/low_min",
                        "clip_ratio/high_max", "cispo_clip_ratio")}}


def eval_batch_metrics(lengths: np.ndarray, cut: np.ndarray, rewards: np.ndarray, batch_of: np.ndarray,
                       group_size: int, scale_rewards: str = "group", per_reward: np.ndarray | None = None,
                       weights: Sequence[float] | None = None,
                       raw: Mapping[str, np.ndarray] | None = None) -> dict[str, float]:
    """An evaluation's reward and completion-length numbers and ``frac_reward_zero_std`` as TRL's
    eval mode logs them: each eval batch's (``batch_of``, ``eval_loss.batches``) as a training
    step's (``reward`` and ``reward_std`` of ``rewards``, ``rewards/<f>/mean`` and ``/std`` of
    ``raw``, each reward's own scores, by label; ``completions/mean_length``, ``min_length``... over
    its completions, ``cut`` those ended by the length limit; ``frac_reward_zero_std`` with
    ``group_size``, ``scale_rewards``, ``per_reward``, ``weights``), then averaged over the
    batches, a NaN left out, as TRL's ``log`` averages its eval metrics. Why: TRL's ``evaluate()``
    returns these averages, which differ from the whole set's numbers with uneven batches."""
    lengths = np.asarray(lengths, dtype=np.float64)
    cut, batch_of = np.asarray(cut, dtype=bool), np.asarray(batch_of)
    scores = np.asarray(rewards, dtype=np.float64)
    per_batch: list[dict[str, float]] = []
    for b in np.unique(batch_of):
        rows = batch_of == b
        mine, ended = lengths[rows], lengths[rows & ~cut]
        ended = ended if ended.size else np.zeros(1)  # every completion cut: TRL logs 0
        per_batch.append({
            "eval/sampled_reward_mean": _nanmean(scores[rows]), "eval/sampled_reward_std": _nanstd(scores[rows]),
            **{f"eval/reward/{label}/{stat}": fn(np.asarray(values, dtype=np.float64)[rows])
               for label, values in (raw or {}).items() for stat, fn in (("mean", _nanmean), ("std", _nanstd))},
            "eval/completion_len_mean": float(mine.mean()),
            "eval/completion_len_min": float(mine.min()), "eval/completion_len_max": float(mine.max()),
            "eval/clipped_ratio": float(cut[rows].mean()), "eval/terminated_len_mean": float(ended.mean()),
            "eval/terminated_len_min": float(ended.min()), "eval/terminated_len_max": float(ended.max()),
            "eval/frac_reward_zero_std": frac_reward_zero_std(
                np.asarray(rewards)[rows], group_size, scale_rewards,
                None if per_reward is None else np.asarray(per_reward)[rows], weights)})
    out = {}
    for key in (per_batch[0] if per_batch else {}):
        valid = [m[key] for m in per_batch if not math.isnan(m[key])]
        out[key] = sum(valid) / len(valid) if valid else float("nan")
    return out


def _nanmean(values: np.ndarray) -> float:
    """``torch.nanmean`` as TRL logs a batch's reward: NaN when no value is valid."""
    valid = values[~np.isnan(values)]
    return float(valid.mean()) if valid.size else float("nan")


def _nanstd(values: np.ndarray) -> float:
    """TRL's ``nanstd`` of a batch's rewards: Bessel's, over the valid values; NaN for fewer than
    two (where ``safe_stats.mean_std`` gives 0), so that TRL's ``log`` leaves that batch out."""
    valid = values[~np.isnan(values)]
    if valid.size < 2:
        return float("nan")
    with np.errstate(invalid="ignore", over="ignore"):
        return float(valid.std(ddof=1))


def tokens_seen(before_training: bool, last: Mapping[str, Any]) -> dict[str, Any]:
    """The ``num_tokens`` an evaluation's line carries for ``trl_eval_names``' ``eval_num_tokens``
    (TRL's eval mode logs the training tokens seen so far): none before training, else those of
    ``last`` (the latest step's line), when it has them."""
    if before_training:
        return {"num_tokens": 0}
    return {"num_tokens": last["num_tokens"]} if "num_tokens" in last else {}


def trl_eval_names(metrics: Mapping[str, Any], names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The evaluation in ``metrics`` under TRL's ``eval_`` names, for what polyrl measures as TRL
    does (the sampled completions scored with the run's rewards: ``eval.reward = "run"``, whose
    std is logged): ``eval_reward``, ``eval_reward_std``, ``eval_rewards/<f>/mean|std``,
    ``eval_completions/mean_length``, with ``eval.loss`` its ``eval_loss`` and clip ratios, and
    ``eval_num_tokens`` where ``metrics`` is a step's line (its ``num_tokens``: TRL's eval mode
    logs the training tokens seen so far), and a reward's ``log_metric(name, ...)`` as ``eval_<name>``
    (``polyrl.eval_log_metrics``). Empty without such an evaluation. ``names``: as for
    ``trl_aliases``. A NaN stays NaN (``_no_value`` says why)."""
    sets = eval_set_parts(metrics)
    if sets:  # named eval sets (TRL's dict eval_dataset): each under eval_<name>_
        shared = {key: value for key, value in metrics.items() if not key.startswith("eval/")}
        return {f"eval_{name}_{key.removeprefix('eval_')}": value for name, part in sets.items()
                for key, value in trl_eval_names({**shared, **part}, names).items()}
    if "eval/sampled_reward_std" not in metrics:
        return {}
    from polyrl.eval_log_metrics import PREFIX  # a reward's log_metric(name, ...): TRL's eval_<name>

    out = {trl: metrics[ours] for ours, trl in TRL_EVAL_ALIASES.items() if ours in metrics}
    out.update(_per_reward(metrics, 4, ["eval", "reward"], "eval_rewards/", names))
    for key, value in metrics.items():
        if key.startswith(PREFIX):
            out.setdefault(f"eval_{key[len(PREFIX):]}", value)
    if "num_tokens" in metrics:
        out["eval_num_tokens"] = metrics["num_tokens"]
    if "eval/seconds" in metrics:  # transformers' speed metrics of the evaluation
        out.update(eval_speed("eval", metrics["eval/seconds"], metrics.get("eval/count"), metrics.get("eval/batches")))
    return out


#: the key prefix of one named eval set's numbers in a step's line: ``eval/sets/<name>/<key>`` for
#: that set's ``eval/<key>`` (``Trainer.eval_set_sizes``, TRL's dict ``eval_dataset``)
NAMED_EVAL = "eval/sets/"


def named_eval(name: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """One named set's evaluation (``eval/<key>``) under ``eval/sets/<name>/<key>``: a step's line
    holds every set's numbers side by side (``eval_set_parts`` takes them apart again)."""
    return {f"{NAMED_EVAL}{name}/{key.removeprefix('eval/')}": value for key, value in metrics.items()}


def eval_set_parts(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> that named eval set's numbers under their own ``eval/<key>`` (``named_eval``), in
    the order the line holds them; empty for a run with one eval set."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in metrics.items():
        if key.startswith(NAMED_EVAL):
            name, _, rest = key[len(NAMED_EVAL):].partition("/")
            out.setdefault(name, {})[f"eval/{rest}"] = value
    return out


def trl_eval_entries(evaluated: Mapping[str, Any], sets: Sequence[str]) -> list[dict[str, Any]]:
    """An evaluation under TRL's names (``trl_eval_names``) as the entries transformers logs it:
    one, or with named eval ``sets`` one per set in their order (its ``eval_<name>_`` keys), as
    transformers' ``evaluate()`` logs and calls ``on_evaluate`` for each set of a dict. A key is
    the set's whose ``eval_<name>_`` prefix is the longest that fits."""
    if not sets:
        return [dict(evaluated)]
    by_length = sorted(sets, key=len, reverse=True)
    entries: dict[str, dict[str, Any]] = {name: {} for name in sets}
    for key, value in evaluated.items():
        name = next((n for n in by_length if key.startswith(f"eval_{n}_")), None)
        if name is None:  # not a set's key: every entry's
            for entry in entries.values():
                entry[key] = value
        else:
            entries[name][key] = value
    return [entry for entry in entries.values() if any(k.startswith("eval_") for k in entry)]


def eval_speed(prefix: str, seconds: float, rows: Any, steps: Any) -> dict[str, float]:
    """transformers' ``speed_metrics`` of an evaluation of ``rows`` eval rows in ``steps``
    batches that took ``seconds``: ``<prefix>_runtime`` and, but for a zero runtime (which
    transformers leaves them out of), ``_samples_per_second`` and ``_steps_per_second``. Why: each
    eval entry of TRL's ``log_history`` (and TensorBoard's ``eval/runtime``) has them; polyrl's
    run logged them from ``evaluate()`` only (``trl_evaluate.trl_metrics``)."""
    out = {f"{prefix}_runtime": round(float(seconds), 4)}
    if seconds > 0:
        if isinstance(rows, (int, float)) and not isinstance(rows, bool):
            out[f"{prefix}_samples_per_second"] = round(rows / seconds, 3)
        if isinstance(steps, (int, float)) and not isinstance(steps, bool):
            out[f"{prefix}_steps_per_second"] = round(steps / seconds, 3)
    return out


#: the keys of a step's ``log_history`` entry transformers' ``Trainer`` writes itself (polyrl's
#: ``lr`` is ``learning_rate``): a NaN there stays a NaN float, as in TRL, where only GRPOTrainer's
#: own averaged metrics turn NaN into None
TRANSFORMERS_KEYS = frozenset({"loss", "grad_norm", "learning_rate", "lr", "epoch"})


def _no_value(key: str, value: Any) -> bool:
    """Whether ``key`` holds NaN that ``log_history`` writes as None, as TRL's ``log`` writes a
    GRPOTrainer metric with no valid value: not one transformers writes itself
    (``TRANSFORMERS_KEYS``), nor an evaluation's (``eval/``, ``eval_``), kept NaN where TRL writes
    None because its own ``_determine_best_metric`` then raises TypeError (None > -inf) and
    ``EarlyStoppingCallback`` stops counting; a NaN is never the best and counts against patience."""
    return isinstance(value, float) and value != value and key not in TRANSFORMERS_KEYS \
        and not key.startswith(("eval/", "eval_"))


def trl_logged(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` with each NaN TRL's ``log`` writes as None replaced by None (``_no_value``)."""
    return {key: None if _no_value(key, value) else value for key, value in metrics.items()}


def frac_reward_zero_std(rewards: np.ndarray, group_size: int, scale_rewards: str = "group",
                         per_reward: np.ndarray | None = None, weights: Sequence[float] | None = None) -> float:
    """TRL's ``frac_reward_zero_std``: the share of completions whose reward std (the one TRL's
    advantage divides by) is 0 to ``np.isclose``'s tolerance. The std leaves NaN (no reward) out
    and is NaN, so not 0, over fewer than two scored rewards: a group (or a batch) no reward
    scored counts as not flat, as TRL logs it (0.0 for a step no reward scored). ``scale_rewards
    = "batch"``: one std over the whole batch (TRL's), so the share is 0 or 1; ``per_reward``
    (samples x rewards) with ``weights``: GDPO (TRL's ``normalize_then_sum``), the batch std of the
    weighted sum of each reward normalized in its group. Why: a per-group exact-equality count
    logged 1.0 where TRL logs 0.0 for a step no reward scored, and differed under "batch"."""
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if not r.size:
        return 0.0
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "mean of empty slice": NaN is meant
        if per_reward is not None:
            r = _normalized_sum(np.asarray(per_reward, dtype=np.float64), weights, group_size)
            std = np.full(r.size, _nan_std(r, None) if r.size > 1 else 0.0)
        elif scale_rewards == "batch":
            std = np.full(r.size, _nan_std(r, None) if r.size > 1 else 0.0)
        elif group_size > 1:
            std = np.repeat(_nan_std(r.reshape(-1, group_size), 1), group_size)
        else:
            std = np.zeros(r.size)
    return float(np.isclose(std, 0.0).mean())


def _nan_std(x: np.ndarray, axis: int | None) -> Any:
    """The sample std (n - 1) of ``x`` leaving NaN out; NaN over fewer than two numbers."""
    count = np.sum(~np.isnan(x), axis=axis)
    variance = np.nanmean((x - np.nanmean(x, axis=axis, keepdims=True)) ** 2, axis=axis)
    return np.sqrt(variance * np.where(count > 1, count / np.maximum(count - 1, 1), np.nan))


def _normalized_sum(matrix: np.ndarray, weights: Sequence[float] | None, group_size: int) -> np.ndarray:
    """GDPO's summed reward: each column normalized in its group (``(x - mean) / (std + 1e-4)``),
    weighted and summed leaving NaN out; a row no reward scored stays NaN."""
    samples, count = matrix.shape
    grouped = matrix.reshape(-1, group_size, count)
    mean = np.nanmean(grouped, axis=1, keepdims=True)
    std = _nan_std(grouped, 1)[:, None, :] if group_size > 1 else np.zeros_like(mean)
    normalized = ((grouped - mean) / (std + 1e-4)).reshape(samples, count)
    w = np.asarray(weights if weights is not None else [1.0] * count, dtype=np.float64)
    out = np.nansum(normalized * w, axis=1)
    out[np.isnan(matrix).all(axis=1)] = np.nan
    return out


def throughput(tokens: Mapping[str, int], seconds: Mapping[str, float]) -> dict[str, float]:
    """``perf/{phase}_tokens_per_s`` for every phase that took measurable time."""
    return {f"perf/{phase}_tokens_per_s": float(tokens[phase] / seconds[phase])
            for phase in tokens if seconds.get(phase, 0.0) > 1e-9}


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (the OS's high-water mark), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak / 2**20 if sys.platform == "darwin" else peak / 1024)  # bytes on macOS, KiB on Linux


#: TRL's names for the ratio clip fractions a backend reports (``clip_low_fraction``...); the
#: extremes ``clip_low_min`` and ``clip_high_max`` where the backend reports them; with policy_loss
#: "cispo", ``cispo_clip_fraction``: the share of loss tokens whose ratio passed the cap with a
#: positive advantage (TRL's ``cispo_clip_ratio``, ``coef_1 > epsilon_high`` and ``advantages > 0``);
#: with "vespo", ``vespo_phi_seq_mean``: the mean over the update's sequences of VESPO's weight
#: (TRL's ``vespo/phi_seq_mean``, its per-sequence weight's mean), where the backend reports it
TRL_CLIP_NAMES = {"clip_low_fraction": "clip_ratio/low_mean", "clip_high_fraction": "clip_ratio/high_mean",
                  "clip_fraction": "clip_ratio/region_mean", "clip_low_min": "clip_ratio/low_min",
                  "clip_high_max": "clip_ratio/high_max", "cispo_clip_fraction": "cispo_clip_ratio",
                  "vespo_phi_seq_mean": "vespo/phi_seq_mean"}


def clip_region_metrics(train_metrics: Mapping[str, Any], policy_loss: str) -> dict[str, float]:
    """The update's clip fractions under TRL's names: below 1 - eps_low with a negative advantage,
    above 1 + eps_high with a positive one, and either (the clipped region). ``low_min`` and
    ``high_max`` are TRL's (since 1.9): the smallest and largest fraction of one completion's
    tokens clipped low / high, over the update's completions on every rank. A backend computes
    them per completion; one that does not report them leaves them out rather than logging the
    mean under their name (only TRL <= 1.8, on one process, logged the mean there).
    ``policy_loss`` picks the names TRL 1.16 logs for its loss (``_compute_loss``): the
    ``clip_ratio/`` ones for its clipped losses (polyrl's ``ppo``), ``cispo_clip_ratio`` alone for
    "cispo", none for "sapo", ``vespo/phi_seq_mean`` alone for "vespo". Why: a cispo run logged ``clip_ratio/high_mean`` (the
    capped share, whatever the advantage's sign) and sapo and vespo runs ``clip_ratio/*`` 0.0, keys
    TRL never logs for those losses."""
    wanted = TRL_CLIP_KEYS.get(policy_loss, ())
    return {trl: float(train_metrics[ours]) for ours, trl in TRL_CLIP_NAMES.items()
            if ours in train_metrics and trl in wanted}


#: the clip names of ``TRL_CLIP_NAMES`` TRL logs for each ``policy_loss`` (TRL 1.16's ``_compute_loss``:
#: ``clip_ratio/*`` for loss_type grpo, bnpo, dr_grpo, dapo and luspo, ``cispo_clip_ratio`` for cispo)
TRL_CLIP_KEYS: dict[str, tuple[str, ...]] = {
    "ppo": tuple(name for name in TRL_CLIP_NAMES.values() if name.startswith("clip_ratio/")),
    "cispo": ("cispo_clip_ratio",),
    "vespo": ("vespo/phi_seq_mean",),
}


#: TRL's names for the sampler-trainer gap a backend reports (``reference.mismatch_metrics``):
#: ``sampling_logp_difference`` is |trainer - sampler log-prob| over the tokens the sampler scored,
#: ``importance_sampling_ratio`` the correction's weight after its cap (with a correction on).
#: A backend without ``backend_kit.gap_metrics.RANK_KEYS`` has them as these aliases (global means).
TRL_SAMPLING_NAMES = {"mismatch_abs": "sampling/sampling_logp_difference/mean",
                      "mismatch_abs_max": "sampling/sampling_logp_difference/max",
                      "mismatch_ratio_min": "sampling/importance_sampling_ratio/min",
                      "mismatch_ratio_mean": "sampling/importance_sampling_ratio/mean",
                      "mismatch_ratio_max": "sampling/importance_sampling_ratio/max"}
_DIFF = ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max")
_RATIO = ("sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
          "sampling/importance_sampling_ratio/max")


def sampling_metrics(train_metrics: Mapping[str, Any]) -> dict[str, float]:
    """TRL's ``sampling/`` names for a backend's global ``mismatch_*`` means: the fallback for a
    backend that does not report its rank's own gap (``trl_process_sampling`` is TRL's exact
    definition)."""
    return {trl: float(train_metrics[ours]) for ours, trl in TRL_SAMPLING_NAMES.items() if ours in train_metrics}


def untrained_gap(trainer_logprobs: Sequence[np.ndarray], sampler_logprobs: Sequence[np.ndarray],
                  objective: Objective) -> dict[str, float]:
    """``backend_kit.gap_metrics.RANK_KEYS`` over completions TRL's batch holds with their loss
    tokens but the update does not train (no reward scored them and the loss has no KL term:
    advantage 0, nothing to learn), each given as its loss tokens' trainer and sampler log-probs
    (the weights before the update, as TRL's ``old_per_token_logps``). Why: TRL's ``sampling/``
    values are over its whole batch, these rows included; the backend saw only the trained ones.
    A sampler token that is NaN has no gap and weighs 1 (``reference.mismatch_weights``)."""
    from polyrl.algorithms.reference import mismatch_weights

    out = {"rank_gap_abs_sum": 0.0, "rank_gap_scored_count": 0.0, "rank_gap_abs_max": 0.0}
    ratios = []
    for t, s in zip(trainer_logprobs, sampler_logprobs):
        t, s = np.asarray(t, np.float64), np.asarray(s, np.float64)
        gap = np.abs(t - s)[~np.isnan(s)]
        out["rank_gap_abs_sum"] += float(gap.sum())
        out["rank_gap_scored_count"] += float(gap.size)
        out["rank_gap_abs_max"] = max(out["rank_gap_abs_max"], float(gap.max()) if gap.size else 0.0)
        if objective.corrects_mismatch and t.size:
            weights = mismatch_weights(t, s, objective)[0]
            ratios.append(weights[:1] if objective.mismatch_level == "sequence" else weights)
    if objective.corrects_mismatch:
        flat = np.concatenate(ratios) if ratios else np.zeros(0)
        out |= {"rank_ratio_sum": float(flat.sum()), "rank_ratio_count": float(flat.size),
                "rank_ratio_min": float(flat.min()) if flat.size else float("inf"),
                "rank_ratio_max": float(flat.max()) if flat.size else float("-inf")}
    return out


def joined_gaps(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    """Two ``RANK_KEYS`` dicts over disjoint rows as one: sums and counts added, the extremes
    the more extreme; a key in one only kept as it is."""
    out = {**b, **a}
    for key in a.keys() & b.keys():
        out[key] = (min if key.endswith("_min") else max if key.endswith("_max") else sum)((a[key], b[key]))
    return out


def trl_process_sampling(gap: Mapping[str, Any], empty_rows: int, sequence_level: bool) -> dict[str, float]:
    """One process's (rank's) ``sampling/`` values as TRL computes them over its generation batch
    (a polyrl step: every mini-batch's rows, ``gap`` holds ``RANK_KEYS`` summed over them).
    ``empty_rows``: its rows in TRL's batch without a loss token (one cut under
    ``mask_truncated_completions``, an empty completion), which TRL's sequence-level ratio counts
    at exp(0) = 1, inside any cap. Nothing seen: 0, as TRL."""
    scored = float(gap["rank_gap_scored_count"])
    out = {_DIFF[0]: float(gap["rank_gap_abs_sum"]) / scored if scored else 0.0,
           _DIFF[1]: float(gap["rank_gap_abs_max"]) if scored else 0.0}
    if "rank_ratio_count" not in gap:  # no correction: TRL logs the difference alone
        return out
    count, total = float(gap["rank_ratio_count"]), float(gap["rank_ratio_sum"])
    low, high = float(gap["rank_ratio_min"]), float(gap["rank_ratio_max"])
    if sequence_level and empty_rows:
        count, total, low, high = count + empty_rows, total + empty_rows, min(low, 1.0), max(high, 1.0)
    return out | dict(zip(_RATIO, (low, total / count, high) if count else (0.0, 0.0, 0.0)))


def trl_gathered_sampling(processes: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """TRL's logged values from every process's (``trl_process_sampling``): the mean of their
    means (not of their tokens), the max of their maxes, the min of their mins."""
    out = {}
    for key in processes[0]:
        values = [float(p[key]) for p in processes]
        out[key] = min(values) if key.endswith("/min") else max(values) if key.endswith("/max") \
            else sum(values) / len(values)
    return out


def step_metrics(shard: Shard, rewards: np.ndarray, group_size: int,
                 seconds: Mapping[str, float], trained_tokens: int, scale_rewards: str = "group",
                 per_reward: np.ndarray | None = None, weights: Sequence[float] | None = None) -> dict[str, Any]:
    """All of the above for the whole step (``shard``: every rank's completions, joined).
    ``seconds`` has the phases' durations (``generate`` the rollout's own, ``reward`` the scoring,
    ``train`` the update; under a launcher each the slowest rank's, which the job waited for);
    ``trained_tokens`` counts the prompt and completion tokens of the sequences the update saw.
    Memory is the largest rank's peak. ``scale_rewards``, ``per_reward``, ``weights``: as for
    ``frac_reward_zero_std``."""
    tokens = {"generate": int(shard.sampled_len.sum()), "score": int(shard.completion_len.sum()),
              "train": trained_tokens}
    phases = {"generate": seconds.get("generate", 0.0), "score": seconds.get("reward", 0.0),
              "train": seconds.get("train", 0.0)}
    return {
        **completion_metrics(shard),
        "frac_reward_zero_std": frac_reward_zero_std(rewards, group_size, scale_rewards, per_reward, weights),
        **throughput(tokens, phases),
        "perf/peak_rss_mb": round(shard.peak_rss_mb, 1),
    }
