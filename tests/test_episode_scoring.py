"""An episode that ended in an environment error is unscored, whenever the environment failed.

Why: only an episode whose environment failed before the model's first turn was left unscored.
One that failed later (a ``step`` that raised) was handed to every reward, and the built-in
``environment`` reward gave it 0: its group's GRPO advantages pushed the model away from whatever
made the environment crash (-0.707 in a group of two) and inflated its sibling's (+0.707).
"""

from __future__ import annotations

import numpy as np

from polyrl import episode_scoring
from polyrl.rewards.builtin import environment
from polyrl.rewards.combine import RewardResult
from polyrl.types import Completion, RewardContext


def _episode(env_reward: float | None, env_error: str | None = None, sampled: int = 3) -> Completion:
    info: dict = {"turns": 1, "env_reward": env_reward}
    if env_error is not None:
        info["env_error"] = env_error
    size = sampled + 2
    return Completion(prompt_index=0, prompt_ids=np.arange(3), completion_ids=np.arange(size),
                      logprobs=np.full(size, -0.5), text="x" * size, finish_reason="stop",
                      mask=np.arange(size) < sampled, messages=[{"role": "assistant", "content": "x"}], info=info)


def test_the_environment_reward_leaves_an_episode_whose_environment_failed_unscored():
    episodes = [_episode(1.0), _episode(None, "RuntimeError: env step blew up"), _episode(None),
                _episode(0.5, "step did not return within 5 s", sampled=0)]
    context = RewardContext(rows=[{}] * 4, wanted=("environment",))
    assert environment(episodes, context) == [1.0, None, 0.0, None]  # the crashed one was 0.0


def test_an_episode_ended_by_an_environment_error_reaches_no_reward_and_is_nan():
    episodes = [_episode(1.0), _episode(0.25, "RuntimeError: env step blew up"), _episode(0.0),
                _episode(None, "ValueError: reset boom", sampled=0)]
    seen: list[list[Completion]] = []

    def score(prompts, rows, completions):
        seen.append(list(completions))
        n = len(completions)
        return RewardResult(total=np.ones(n), per_reward={"r": np.ones(n)}, metrics={}, extra={"col": ["v"] * n})

    out = episode_scoring.score_started(score, ["p"] * 4, [{}] * 4, episodes)
    # the one that failed after its first turn was scored
    assert [[next(i for i, e in enumerate(episodes) if e is c) for c in call] for call in seen] == [[0, 2]]
    np.testing.assert_array_equal(out.total, [1.0, np.nan, 1.0, np.nan])
    np.testing.assert_array_equal(out.per_reward["r"], [1.0, np.nan, 1.0, np.nan])
    assert out.extra["col"] == ["v", None, "v", None]


def test_completions_that_are_not_episodes_are_all_scored():
    plain = [_single_turn(i) for i in range(3)]

    def score(prompts, rows, completions):
        return RewardResult(total=np.arange(len(completions), dtype=float), per_reward={}, metrics={})

    np.testing.assert_array_equal(episode_scoring.score_started(score, ["p"] * 3, [{}] * 3, plain).total, [0, 1, 2])


def _single_turn(i: int) -> Completion:
    """A single-turn completion (no mask), even with a stray ``env_error`` key in its info."""
    return Completion(prompt_index=i, prompt_ids=np.arange(2), completion_ids=np.arange(2), logprobs=np.zeros(2),
                      text="ab", finish_reason="stop", info={"env_error": "not an episode"} if i == 1 else {})
