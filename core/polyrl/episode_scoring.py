"""What the rewards and the completions log get for multi-turn episodes.

Why: two things a TRL-style reward function relies on held only for single-turn rollouts. Its
``prompts`` were the dataset row's prompt even when an environment's ``reset`` wrote what the model
was actually asked (an LLM judge scored answers against a question nobody asked); and an episode
whose environment failed before the model said anything reached it as an empty conversation, so
the usual ``completion[0]["content"]`` raised and stopped the run, blaming the reward for the
environment's error. Such episodes are left unscored (as a reward's ``None``): the step trains on
the rest, and an environment that fails every episode stops the run naming itself.

The same holds for an episode whose environment failed after the model's first turn
(``info["env_error"]``: a ``step`` that raised, hung or answered garbage): it is handed to no
reward and left unscored (NaN), so it is out of the loss and out of its group's baseline. Once it
was scored like any other, the built-in ``environment`` reward giving it 0: the model was pushed
away from whatever made the environment crash, and its siblings got inflated advantages. Other
rewards do not score it either: its conversation was cut short by the environment, not ended by
the model, and a partial total (say a format bonus without the environment's reward) would
compare it with finished siblings on a different scale.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from polyrl.rewards.combine import RewardResult
from polyrl.types import Completion, Prompt


def prompts_asked(rows: Sequence[Mapping[str, Any]], completions: Sequence[Completion], column: str) -> list[Prompt]:
    """Each completion's prompt as the model saw it: an environment's first messages where it wrote
    them, else the dataset row's prompt (``rows`` is one row per completion)."""
    out: list[Prompt] = []
    for row, c in zip(rows, completions):
        prompt = c.prompt_messages if c.prompt_messages is not None else row[column]
        if c.mask is not None and isinstance(prompt, str):  # an episode: the text was asked as a user message
            prompt = [{"role": "user", "content": prompt}]
        out.append(prompt)
    return out


def env_failed(completion: Completion) -> bool:
    """An episode that ended in an environment error (``info["env_error"]``), before the model
    sampled a token or after: it has no reward to train on."""
    return completion.mask is not None and completion.info.get("env_error") is not None


def spread(result: RewardResult, kept: Sequence[int], n: int) -> RewardResult:
    """``result`` of the completions at ``kept`` placed among ``n``: the others unscored (NaN, and
    None in the extra log columns)."""
    where = np.asarray(kept, dtype=np.int64)

    def full(scores: np.ndarray) -> np.ndarray:
        out = np.full(n, np.nan, dtype=np.float64)
        out[where] = scores
        return out

    extra: dict[str, list[Any]] = {}
    for name, values in result.extra.items():
        column: list[Any] = [None] * n
        for i, value in zip(kept, values):
            column[i] = value
        extra[name] = column
    return attrs.evolve(result, total=full(result.total),
                        per_reward={k: full(v) for k, v in result.per_reward.items()}, extra=extra)


def score_started(score: Callable[[list[Prompt], list[Mapping[str, Any]], list[Completion]], RewardResult],
                  prompts: Sequence[Prompt], rows: Sequence[Mapping[str, Any]],
                  completions: Sequence[Completion]) -> RewardResult:
    """``score(prompts, rows, completions)`` of the completions whose environment did not fail;
    the episodes that ended in an environment error unscored (NaN)."""
    kept = [i for i, c in enumerate(completions) if not env_failed(c)]
    if len(kept) == len(completions):
        return score(list(prompts), list(rows), list(completions))
    scored = score([prompts[i] for i in kept], [rows[i] for i in kept], [completions[i] for i in kept])
    return spread(scored, kept, len(completions))
