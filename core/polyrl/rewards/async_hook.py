"""The synchronous ``reward`` hook of a reward plugin that scores in a coroutine (``is_async =
True``, ``await_reward``: the LLM judge, the code reward). ``RewardComputer`` awaits such a plugin's
coroutine in its own event loop; a caller of the plain hook gets the same answer, the coroutine run
to completion (``run_coroutine``, also from inside a running loop). One wrapper, and one
``await_reward`` around a scoring coroutine, so the plugins differ only in how they score."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from polyrl.hookspecs import hookimpl
from polyrl.types import Completion, Prompt, RewardContext, RewardScores

#: An ``await_reward`` coroutine function: the plugin's scores by reward name, or None when not asked.
AwaitReward = Callable[[Sequence[Prompt], Sequence[Completion], RewardContext],
                       Awaitable[dict[str, RewardScores] | None]]
RewardHook = Callable[[Sequence[Prompt], Sequence[Completion], RewardContext], dict[str, RewardScores] | None]
#: A reward's scoring coroutine function: the prompts, the completions, their dataset rows and the
#: reward's options from the config (None when it has none) to the completions' scores.
Score = Callable[[Sequence[Prompt], Sequence[Completion], Sequence[Mapping[str, Any]], Mapping[str, Any] | None],
                 Awaitable[RewardScores]]


def await_scores(name: str, score: Score) -> AwaitReward:
    """The ``await_reward`` of the reward ``name`` that ``score`` computes: None where the run does
    not ask for ``name``, else ``{name: scores}`` from ``context``'s rows and ``name``'s options."""

    async def await_reward(prompts: Sequence[Prompt], completions: Sequence[Completion],
                           context: RewardContext) -> dict[str, RewardScores] | None:
        if name not in context.wanted:
            return None
        return {name: await score(prompts, completions, context.rows, context.options.get(name))}

    return await_reward


def sync_reward(name: str, await_reward: AwaitReward) -> RewardHook:
    """The ``reward`` hookimpl of the reward ``name`` whose plugin scores in ``await_reward``."""

    @hookimpl
    def reward(prompts: Sequence[Prompt], completions: Sequence[Completion],
               context: RewardContext) -> dict[str, RewardScores] | None:
        if name not in context.wanted:
            return None
        from polyrl.rewards.functions import run_coroutine

        result: dict[str, RewardScores] | None = run_coroutine(await_reward(prompts, completions, context))
        return result

    return reward
