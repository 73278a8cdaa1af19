"""One step's facts from every rank, so a launched run logs and decides what one process would.

Why: under a launcher each rank holds its share of the step's completions (``rows[rank::world]``).
A metric or a decision taken on a rank's own share (``episode/turns_mean``, completion lengths,
a reward's mean, dropping a rollout whose every episode failed) describes or treats that share, not
the step: rank 0 then logged its half, and two ranks trained otherwise than one process on the
same rows. Each rank packs what those need into a ``Shard`` (numbers, no token ids or text), the
trainer gathers the shards with the rewards (one collective), and everything here works on the
joined shard: the same code in one process, whose step is one shard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from polyrl.safe_stats import mean_std

#: Reward plugin metrics that count events over the rank's samples: summed over the ranks. Any
#: other plugin metric is taken as a per-sample mean or rate and averaged, weighted by samples,
#: but a mean of counted values (``Shard.metric_counts``: a TRL reward's ``log_metric`` calls),
#: which is pooled over every rank's values, as TRL's flush does.
COUNT_METRICS = frozenset({"failures", "parse_failures", "requests", "retries", "timeouts", "violations"})


#: The step metric holding a ``log_metric`` name, pooled over every reward's values
#: (``log_metric_means``); ``log_history`` has it under the bare name, as TRL logs it.
LOG_METRIC_PREFIX = "log_metric/"


def _is_count(name: str) -> bool:
    return name in COUNT_METRICS or name.endswith("_count")


def _ints(values: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def _flags(values: Sequence[bool] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=bool).reshape(-1)


def episode_facts(info: Mapping[str, Any], mask: np.ndarray) -> dict[str, float | None]:
    """What ``episode/*`` metrics need of one episode (its ``Completion.info`` and loss mask)."""
    reward = info.get("env_reward")
    return {"turns": float(info["turns"]), "tool_calls": float(info["tool_calls"]),
            "tool_errors": float(info["tool_errors"]), "format_errors": float(info["format_errors"]),
            "unrun_last_turn_calls": float(info.get("unrun_last_turn_calls") or 0),
            "env_error": float(bool(info.get("env_error"))), "env_reward": None if reward is None else float(reward),
            "sampled": float(np.count_nonzero(mask)), "tokens": float(len(mask))}


@attrs.frozen
class Shard:
    """A rank's completions of the step as numbers, aligned with its rewards."""

    completion_len: np.ndarray  # tokens of each completion (an episode's inserted ones included)
    sequence_len: np.ndarray  # prompt + completion tokens: what the update trains on
    sampled_len: np.ndarray  # tokens the generator sampled (an episode's mask's True entries)
    clipped: np.ndarray  # finish reason "length"
    episode: np.ndarray  # a multi-turn episode (it has a loss mask)
    env_error: np.ndarray  # an episode that ended in an environment error
    episodes: tuple[dict[str, float | None], ...] = ()  # ``episode_facts`` of each episode, in order
    per_reward: Mapping[str, np.ndarray] = attrs.field(factory=dict)  # each reward's scores (NaN: None)
    reward_metrics: Mapping[str, Mapping[str, float]] = attrs.field(factory=dict)  # per reward, as scored
    # per reward, how many values each of its metrics is the mean of (``RewardResult.metric_counts``)
    metric_counts: Mapping[str, Mapping[str, int]] = attrs.field(factory=dict)
    kl_sums: np.ndarray | None = None  # kl_in_reward: each sequence's summed KL to the reference
    seconds: Mapping[str, float] = attrs.field(factory=dict)  # this rank's phases (generate, reward)
    peak_rss_mb: float = 0.0

    @classmethod
    def of(cls, completions: Sequence[Any], **rest: Any) -> Shard:
        """The shard of ``completions`` (``rest``: the reward and timing fields)."""
        episodes = tuple(episode_facts(c.info, c.mask) for c in completions if c.mask is not None)
        return cls(
            completion_len=_ints([len(c.completion_ids) for c in completions]),
            sequence_len=_ints([len(c.prompt_ids) + len(c.completion_ids) for c in completions]),
            sampled_len=_ints([len(c.completion_ids) if c.mask is None else int(np.count_nonzero(c.mask))
                               for c in completions]),
            clipped=_flags([c.finish_reason == "length" for c in completions]),
            episode=_flags([c.mask is not None for c in completions]),
            env_error=_flags([c.mask is not None and bool(c.info.get("env_error")) for c in completions]),
            episodes=episodes, **rest)

    @property
    def size(self) -> int:
        return len(self.completion_len)


def join(shards: Sequence[Shard]) -> Shard:
    """The whole step from its shards in rank order: per-sample values concatenated, each phase
    the slowest rank's (the ranks wait for it), memory the largest rank's."""
    names = list(shards[0].per_reward) if shards else []
    kl = [s.kl_sums for s in shards if s.kl_sums is not None]
    phases = {k for s in shards for k in s.seconds}
    return Shard(
        completion_len=_ints(np.concatenate([s.completion_len for s in shards])) if shards else _ints([]),
        sequence_len=_ints(np.concatenate([s.sequence_len for s in shards])) if shards else _ints([]),
        sampled_len=_ints(np.concatenate([s.sampled_len for s in shards])) if shards else _ints([]),
        clipped=_flags(np.concatenate([s.clipped for s in shards])) if shards else _flags([]),
        episode=_flags(np.concatenate([s.episode for s in shards])) if shards else _flags([]),
        env_error=_flags(np.concatenate([s.env_error for s in shards])) if shards else _flags([]),
        episodes=tuple(e for s in shards for e in s.episodes),
        per_reward={n: np.concatenate([np.asarray(s.per_reward[n], dtype=np.float64) for s in shards]) for n in names},
        reward_metrics=_joined_reward_metrics(shards),
        metric_counts=_joined_counts(shards),
        kl_sums=np.concatenate(kl) if kl else None,
        seconds={k: max(s.seconds.get(k, 0.0) for s in shards) for k in phases},
        peak_rss_mb=max((s.peak_rss_mb for s in shards), default=0.0))


def _joined_reward_metrics(shards: Sequence[Shard]) -> dict[str, dict[str, float]]:
    """Each reward's metrics over the whole step: mean/std/none_count from the joined scores,
    latency the slowest rank's, a TRL reward's ``log_metric`` means pooled by their counts (TRL's
    flush: every process's values summed over their number, whatever the samples), a plugin's
    counts summed and its rates weighted by samples."""
    out: dict[str, dict[str, float]] = {}
    names = list(shards[0].reward_metrics) if shards else []
    for name in names:
        parts = [(s.size, s.reward_metrics.get(name, {})) for s in shards]
        scores = np.concatenate([np.asarray(s.per_reward.get(name, np.full(s.size, np.nan)), dtype=np.float64)
                                 for s in shards])
        valid = scores[~np.isnan(scores)]
        spread = dict(zip(("mean", "std"), mean_std(valid)))
        merged: dict[str, float] = {}
        for key in dict.fromkeys(k for _, m in parts for k in m):
            if key in spread:
                merged[key] = spread[key]
            elif key == "none_count":
                merged[key] = int(scores.size - valid.size)  # an int, as one process logs
            elif key == "latency_s":
                merged[key] = max(float(m[key]) for _, m in parts if key in m)
            elif any(counted := [s.metric_counts.get(name, {}).get(key, 0) for s in shards]):
                pooled = [(c, float(m[key])) for c, (_, m) in zip(counted, parts) if key in m and c]
                merged[key] = sum(c * v for c, v in pooled) / sum(c for c, _ in pooled)
            elif _is_count(key):
                merged[key] = float(sum(float(m[key]) for _, m in parts if key in m))
            else:
                weighted = [(n, float(m[key])) for n, m in parts if key in m]
                total = sum(n for n, _ in weighted)
                merged[key] = (sum(n * v for n, v in weighted) / total if total
                               else float(np.mean([v for _, v in weighted])))
        out[name] = merged
    return out


def _joined_counts(shards: Sequence[Shard]) -> dict[str, dict[str, int]]:
    """Each reward's metric counts over the whole step: every rank's added."""
    out: dict[str, dict[str, int]] = {}
    for shard in shards:
        for name, counts in shard.metric_counts.items():
            for key, count in counts.items():
                out.setdefault(name, {})[key] = out.get(name, {}).get(key, 0) + int(count)
    return out


def log_metric_means(step: Shard) -> dict[str, float]:
    """Each ``log_metric`` name the step's rewards logged, pooled over all their values: TRL 1.16
    keeps one list per name for the whole step (``_pending_metrics[name]``), so ``acc`` logged by
    two reward functions is the sum of every value over their number. Why: the bare name in
    ``log_history`` was the first reward's mean alone. Every name, even one reward's, so that a
    ``logging_steps`` window averages the same key over its steps whichever rewards logged it."""
    pooled: dict[str, list[tuple[int, float]]] = {}
    for name, counts in step.metric_counts.items():
        for key, count in counts.items():
            value = step.reward_metrics.get(name, {}).get(key)
            if count and value is not None:
                pooled.setdefault(key, []).append((int(count), float(value)))
    with np.errstate(invalid="ignore"):  # inf and -inf from two rewards: NaN, as TRL's sum gives
        return {key: sum(c * v for c, v in parts) / sum(c for c, _ in parts) for key, parts in pooled.items()}


def every_episode_failed(shard: Shard) -> bool:
    """The step has episodes and every one ended in an environment error (on every rank)."""
    return bool(shard.episode.any() and shard.env_error[shard.episode].all())


def untrainable(shard: Shard) -> np.ndarray:
    """Per sample of the step: True for an episode with nothing to train on. That is one with no
    token (its reset failed), and every episode of a step whose episodes all ended in an
    environment error (their rewards say how the environment broke, not how the model did).
    Decided on the whole step's shard, as one process decides, never on one rank's share."""
    if every_episode_failed(shard):
        return shard.episode.copy()
    return shard.episode & (shard.completion_len == 0)


def out_of_loss(shard: Shard) -> np.ndarray:
    """Per sample: True for an episode no loss term trains, not even at advantage 0 for a KL term
    or an entropy bonus (``AlgorithmConfig.loss_selection``'s ``barred``): one that ended in an
    environment error (its tokens stop where the environment broke, not where the model did; TRL's
    run stops on such an error) or that has nothing to train (``untrainable``). An episode no
    reward scored is not one: TRL keeps it in its loss at advantage 0."""
    return shard.env_error | untrainable(shard)


def episode_metrics(shard: Shard) -> dict[str, float]:
    """Per-step means over the step's episodes (empty for single-turn completions)."""
    infos = shard.episodes
    if not infos:
        return {}
    n = len(infos)

    def share(key: str) -> float:
        return sum(1 for i in infos if (i[key] or 0) > 0) / n

    calls = sum(float(i["tool_calls"] or 0) for i in infos)
    trl_calls = calls - sum(float(i.get("unrun_last_turn_calls") or 0) for i in infos)
    out = {
        "episode/turns_mean": sum(float(i["turns"] or 0) for i in infos) / n,
        "episode/tool_calls_mean": sum(float(i["tool_calls"] or 0) for i in infos) / n,
        "episode/tool_call_share": share("tool_calls"),
        "episode/tool_error_share": share("tool_errors"),
        "episode/format_error_share": share("format_errors"),
        "episode/env_error_share": share("env_error"),
        "episode/sampled_token_share": float(sum(float(i["sampled"] or 0) for i in infos)
                                             / max(1.0, sum(float(i["tokens"] or 0) for i in infos))),
        # TRL's names (its tool-calling runs log them): calls per completion, and the share of the
        # calls that answered an error (a tool that raised, an unknown tool, a call over the cap);
        # as TRL counts them, without the calls of the last turn max_turns allows (its loop stops
        # after max_tool_calling_iterations rounds: the next turn's calls are neither run nor counted)
        "tools/call_frequency": trl_calls / n,
        "tools/failure_frequency": sum(float(i["tool_errors"] or 0) for i in infos) / trl_calls if trl_calls else 0.0,
    }
    rewards = [float(i["env_reward"]) for i in infos if i["env_reward"] is not None]
    if rewards:  # overflow-safe: finite rewards near float64's largest summed to inf
        out["episode/env_reward_mean"] = mean_std(np.asarray(rewards, dtype=np.float64))[0]
    return out


def picked_here(count: int, positions: Sequence[int], total: int, seed: int) -> list[int]:
    """Which of this rank's completions the step's completions log shows: the ones whose
    one-process ``positions`` are among ``count`` drawn of ``total`` with ``seed``, so a launched
    run logs the completions of the rows one process would (see ``tracking.completions.pick``)."""
    from polyrl.tracking.completions import pick

    chosen = set(pick(count, total, seed))
    return [i for i, p in enumerate(positions) if p in chosen]


def one_process_positions(size: int, rank: int, world: int, group_size: int) -> list[int]:
    """Where each of rank ``rank``'s ``size`` completions sits in one process's batch: the rank
    holds rows ``rank::world`` of the step's rows, each row's ``group_size`` samples together."""
    return [((i // group_size) * world + rank) * group_size + i % group_size for i in range(size)]


def step_records(samples: Sequence[Sequence[tuple[int, int, dict[str, Any]]]], sizes: Sequence[int],
                 advantages: np.ndarray) -> list[dict[str, Any]]:
    """The completions log's records of every rank, in one process's order, each with its
    advantage. ``samples``: per rank, (one-process position, index on the rank, record);
    ``sizes``: the ranks' completion counts; ``advantages``: the whole step's, in rank order."""
    out: list[tuple[int, dict[str, Any]]] = []
    offset = 0
    for ranks_samples, size in zip(samples, sizes):
        for position, local, record in ranks_samples:
            value = float(advantages[offset + local])
            out.append((position, {**record, "advantage": value if np.isfinite(value) else None}))
        offset += size
    return [record for _, record in sorted(out, key=lambda x: x[0])]
