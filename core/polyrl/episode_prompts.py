"""An episode's first prompt, encoded from its dataset row alone, for the startup length check.

Why: with ``[environment]`` tools and no environment factory, an episode's first prompt is the
row's prompt plus the tool instructions (the template's ``tools=``, or a system message listing
them); a prompt that fits ``model.max_length`` alone can be pushed past it by them, and the
episode would then end as an environment error at its first turn, shrinking every batch that draws
that row. Counted here as the episode runner encodes it, the startup check
(``polyrl.data.check_prompt_lengths``) errs or drops it as it does single-turn prompts.

With an environment factory (``environment.name``), its ``reset(row)`` writes the first messages:
they are known only by running the environment's code on every row, so those prompts are left to
the episode runner, which ends an episode whose first prompt does not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from polyrl.types import Prompt

if TYPE_CHECKING:  # the trainer imports this module; the agents package loads only for episodes
    from polyrl.agents.episodes import EpisodeRunner


def first_prompt_encoder(runner: EpisodeRunner | None) -> Callable[[Prompt], Any] | None:
    """The ids of the first prompt an episode on a row with ``prompt`` renders (chat template and
    tool instructions included, through the runner's own code), or None when an environment
    writes the first messages (or there are no episodes)."""
    if runner is None or runner.make_environment is not None:
        return None
    return runner.first_prompt_ids
