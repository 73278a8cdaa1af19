"""A launched step's metrics and decisions are the whole step's, as one process's (no process group
here: each "rank" holds rows[rank::world] of one batch and the shards are joined as a gather
returns them, in rank order)."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl import step_gather
from polyrl.step_metrics import step_metrics
from polyrl.tracking.completions import pick
from polyrl.types import Completion

GROUP = 2


def _episode(row: int, sample: int, env_error: bool = False) -> Completion:
    """Row ``row``'s episode: row-dependent turns, tokens and environment reward."""
    turns, size = 1 + row % 3, 3 + row + sample
    info = {"turns": turns, "tool_calls": row % 2, "tool_errors": int(row == 3), "format_errors": 0,
            "env_reward": float(row) if row != 2 else None}
    if env_error:
        info["env_error"] = "the game server is down"
    return Completion(prompt_index=row, prompt_ids=np.arange(2 + row), completion_ids=np.arange(size),
                      logprobs=np.zeros(size), finish_reason="length" if row == 1 else "stop",
                      mask=np.arange(size) % (turns + 1) != 0, messages=[], info=info)


def _batch(rows: list[int], failed: set[int] = frozenset()) -> list[Completion]:  # type: ignore[assignment]
    return [_episode(r, s, env_error=r in failed) for r in rows for s in range(GROUP)]


def _shard(rows: list[int], failed: set[int] = frozenset(), latency: float = 0.1) -> step_gather.Shard:  # type: ignore[assignment]
    completions = _batch(rows, failed)
    scores = np.array([float(r) if r != 1 else np.nan for r in rows for _ in range(GROUP)])
    valid = scores[~np.isnan(scores)]
    metrics = {"r": {"mean": float(valid.mean()) if valid.size else float("nan"),
                     "std": float(valid.std(ddof=1)) if valid.size > 1 else 0.0, "latency_s": latency,  # as combine
                     "none_count": int(scores.size - valid.size), "failures": float(len(rows)),
                     "cache_hit_rate": float(rows[0] % 2)}}
    return step_gather.Shard.of(completions, per_reward={"r": scores}, reward_metrics=metrics,
                                seconds={"generate": latency * 10, "reward": latency}, peak_rss_mb=100 + latency)


ROWS = [0, 1, 2, 3, 4]  # 5 prompts on 2 ranks: rank 0 holds rows 0, 2, 4 and rank 1 rows 1, 3


def test_joined_shards_give_one_process_metrics_and_rank_zero_alone_does_not():
    one = _shard(ROWS, latency=0.3)
    ranks = [_shard(ROWS[0::2], latency=0.3), _shard(ROWS[1::2], latency=0.2)]
    joined = step_gather.join(ranks)
    rewards = np.concatenate([s.per_reward["r"] for s in ranks])
    whole = step_metrics(one, one.per_reward["r"], GROUP, one.seconds, 7)
    assert step_gather.episode_metrics(joined) == pytest.approx(step_gather.episode_metrics(one))
    assert step_metrics(joined, rewards, GROUP, joined.seconds, 7) == pytest.approx(whole)
    merged = joined.reward_metrics["r"]
    assert merged["mean"] == pytest.approx(one.reward_metrics["r"]["mean"])
    assert merged["std"] == pytest.approx(one.reward_metrics["r"]["std"])
    assert merged["none_count"] == 2 and isinstance(merged["none_count"], int)
    assert merged["latency_s"] == 0.3 and merged["failures"] == 5.0  # the slowest rank; counts add up
    assert merged["cache_hit_rate"] == pytest.approx((6 * 0.0 + 4 * 1.0) / 10)  # weighted by samples
    assert joined.seconds == {"generate": 3.0, "reward": 0.3} and joined.peak_rss_mb == 100.3
    assert int(joined.sampled_len.sum()) == int(one.sampled_len.sum())
    # what rank 0 logged before: its own share's episodes and lengths
    alone = step_gather.episode_metrics(ranks[0])
    assert alone["episode/turns_mean"] != pytest.approx(step_gather.episode_metrics(one)["episode/turns_mean"])


def test_dropping_failed_episodes_is_decided_over_the_whole_step():
    """Rank 1's every episode ended in an environment error, rank 0's did not: one process trains
    them all (only a step whose every episode failed is dropped); rank 1 alone dropped its own."""
    failed = {1, 3}
    ranks = [_shard(ROWS[0::2], failed), _shard(ROWS[1::2], failed)]
    assert step_gather.untrainable(ranks[1]).all()  # the per-rank decision
    joined = step_gather.join(ranks)
    assert not step_gather.untrainable(joined).any()
    assert not step_gather.untrainable(_shard(ROWS, failed)).any()
    everywhere = step_gather.join([_shard(ROWS[0::2], set(ROWS)), _shard(ROWS[1::2], set(ROWS))])
    assert step_gather.untrainable(everywhere).all()
    # the warning that a step is not trained follows the same whole-step decision (once, by the trainer)
    assert step_gather.every_episode_failed(ranks[1]) and not step_gather.every_episode_failed(joined)
    assert step_gather.every_episode_failed(everywhere)
    empty = _batch([0]) + [Completion(prompt_index=1, prompt_ids=[1], completion_ids=[], logprobs=[], mask=[],
                                      info={"turns": 0, "tool_calls": 0, "tool_errors": 0, "format_errors": 0,
                                            "env_error": "reset failed"})]
    assert step_gather.untrainable(step_gather.Shard.of(empty)).tolist() == [False, False, True]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_completions_log_shows_the_samples_one_process_picks_with_their_advantages(world):
    rows, count, seed = 5, 4, 1234
    total = rows * GROUP
    advantages_one = np.linspace(-1, 1, total)  # by one-process position
    samples, sizes, rank_order = [], [], []
    for rank in range(world):
        size = len(range(rank, rows, world)) * GROUP
        positions = step_gather.one_process_positions(size, rank, world, GROUP)
        here = step_gather.picked_here(count, positions, total, seed)
        samples.append([(positions[i], i, {"position": positions[i], "advantage": None}) for i in here])
        sizes.append(size)
        rank_order += positions
    assert sorted(rank_order) == list(range(total))  # every completion has its own position
    advantages = advantages_one[rank_order]  # as the gathered (rank-ordered) advantages hold them
    records = step_gather.step_records(samples, sizes, advantages)
    assert [r["position"] for r in records] == pick(count, total, seed)
    assert [r["advantage"] for r in records] == pytest.approx([advantages_one[p] for p in pick(count, total, seed)])


def test_the_environment_reward_mean_of_huge_finite_rewards_is_finite():
    """Once `sum(rewards) / n`: 1e308 rewards logged episode/env_reward_mean as inf (null in the
    file) while reward/environment/mean, through safe_stats, read 1e308."""
    info = {"turns": 1, "tool_calls": 0, "tool_errors": 0, "format_errors": 0}
    episodes = [Completion(0, [1], [2], [0.0], mask=[True], info={**info, "env_reward": r})
                for r in (1e308, 1e308, -1e307, None)]
    metrics = step_gather.episode_metrics(step_gather.Shard.of(episodes))
    assert metrics["episode/env_reward_mean"] == pytest.approx(1e308 / 3 * 2 - 1e307 / 3, rel=1e-12)


def test_episode_metrics_carry_trls_tool_call_and_failure_frequencies():
    """TRL's tools/call_frequency (calls per completion) and tools/failure_frequency (failed calls
    over calls), which a TRL tools script's callbacks and dashboards read; absent before."""
    info = {"turns": 2, "format_errors": 0}
    episodes = [Completion(0, [1], [2], [0.0], mask=[True], info={**info, "tool_calls": c, "tool_errors": e})
                for c, e in ((3, 1), (1, 0), (0, 0), (4, 2))]
    metrics = step_gather.episode_metrics(step_gather.Shard.of(episodes))
    assert metrics["tools/call_frequency"] == pytest.approx(8 / 4)
    assert metrics["tools/failure_frequency"] == pytest.approx(3 / 8)
    none = [Completion(0, [1], [2], [0.0], mask=[True], info={**info, "tool_calls": 0, "tool_errors": 0})]
    assert step_gather.episode_metrics(step_gather.Shard.of(none))["tools/failure_frequency"] == 0.0


def test_a_log_metric_name_is_pooled_over_every_rank_and_reward_as_trls_flush():
    """TRL 1.16 flushes a ``log_metric`` name as the sum of every value logged under it, whatever
    rank or reward logged it, over their number: rewards "a" and "b" on two ranks logging "acc"
    [1, 1], [0] and [0, 0, 0], [] give 2 / 6, not the mean of the rewards' means."""
    logged = {0: {"a": [1.0, 1.0], "b": [0.0]}, 1: {"a": [0.0, 0.0, 0.0]}}
    shards = []
    for rank in (0, 1):
        completions = _batch([rank])
        scores = {name: np.zeros(len(completions)) for name in ("a", "b")}
        metrics = {name: {"mean": 0.0, **({"acc": float(np.mean(v))} if (v := logged[rank].get(name)) else {})}
                   for name in ("a", "b")}
        counts = {name: {"acc": len(v)} for name, v in logged[rank].items()}
        shards.append(step_gather.Shard.of(completions, per_reward=scores, reward_metrics=metrics,
                                           metric_counts=counts))
    step = step_gather.join(shards)
    assert step_gather.log_metric_means(step) == {"acc": pytest.approx(2 / 6)}
    assert step.reward_metrics["a"]["acc"] == pytest.approx(2 / 5)  # each reward's own stays its own
